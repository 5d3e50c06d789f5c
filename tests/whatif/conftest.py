"""A platform with a little history to replay: nodes, guarantees, funded tenants, jobs that ran (measured by
their agents' usage reports and settled), one still pending and one cancelled before it ran."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import World


@dataclass
class History:
    world: World
    since: datetime
    until: datetime
    ran: list[Any]  # jobs that ran and completed, in submit order
    pending: Any  # still waiting (bid below every reserve)
    cancelled: Any  # cancelled before it ran: not in the trace


@pytest.fixture
def history(world: World) -> History:
    from django.utils import timezone

    from market.models import EndReason, Job, JobState, Lease
    from market.services.guarantees import guarantee_set
    from market.services.leases import lease_running, lease_stopped
    from market.services.rounds import round_tick
    from tests.frontend.conftest import report_usage
    from tests.market.round_helpers import make_job

    world.nodes(world.h100, 2, size=8)
    world.nodes(world.a100, 1, size=4)
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=4, actor=world.admin)
    guarantee_set(tenant=world.beta, gpu_type=world.h100, gpus=4, actor=world.admin)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 1000)
    now = timezone.now()
    a = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 3}, age_s=3600, name="resnet")
    b = make_job(
        world.beta, world.bea, gpus=8, limits={world.h100: 2.5, world.a100: 2}, age_s=3000, name="llm"
    )
    c = make_job(world.gamma, world.cara, gpus=4, limits={world.a100: 1.5}, age_s=2400, name="asr")
    pending = make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 1}, age_s=1800, name="cheap")
    cancelled = make_job(world.beta, world.bob, gpus=1, limits={world.h100: 1}, age_s=1200, name="oops")
    Job.objects.filter(pk=cancelled.pk).update(state=JobState.CANCELLED, ended_at=now)
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    for job, seconds in ((a, 1200), (b, 600), (c, 300)):
        lease = Lease.objects.get(job=job)
        lease_running(lease_id=lease.pk)
        report_usage(Lease.objects.get(pk=lease.pk), seconds=seconds)
        lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED)
    return History(
        world=world,
        since=now - timedelta(hours=2),
        until=now + timedelta(seconds=1),
        ran=[Job.objects.get(pk=j.pk) for j in (a, b, c)],
        pending=Job.objects.get(pk=pending.pk),
        cancelled=Job.objects.get(pk=cancelled.pk),
    )
