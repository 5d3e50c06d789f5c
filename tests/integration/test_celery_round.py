"""A real Celery worker process, on Redis, clears a round against the test PostgreSQL database.

The worker is started as a subprocess on a queue of its own (so nothing else on this Redis can take the task)
and pointed at the test database; the test sends the beat's task over the broker and waits for the round.
"""

from __future__ import annotations

import time
from io import StringIO

import pytest
from django.core.management import call_command

from allocator import clear
from market.models import Command, CommandKind, Hold, Job, JobState, Round, RoundState
from market.selectors.book import Snapshot
from tests.market.round_helpers import make_job
from tests.round_holds import decided_holds

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_clears_a_round_with_jobs_of_three_tenants(world, worker_queue):
    from market.tasks import round_tick

    world.nodes(world.h100, 2, size=8)
    world.nodes(world.a100, 1, size=4)
    submitted = []
    for tenant, user in ((world.alpha, world.alice), (world.beta, world.bob), (world.gamma, world.carl)):
        world.fund(tenant, 500)
        client = world.client(user, tenant=tenant)
        for gpus, bids in ((4, [("H100", "4"), ("A100", "3")]), (2, [("A100", "2.5")])):
            body = {
                "name": f"{tenant.slug}-{gpus}",
                "command": "python train.py",
                "gpus": gpus,
                "max_hours": "2",
                "bids": [{"gpu_type": t, "limit": limit} for t, limit in bids],
            }
            response = client.post(f"/api/v1/tenants/{tenant.slug}/jobs", body, format="json")
            assert response.status_code == 201, response.json()
            submitted.append(response.json()["id"])
    make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 1})  # below reserve: loses

    round_tick.apply_async(queue=worker_queue)
    deadline = time.monotonic() + 90
    rnd = None
    while time.monotonic() < deadline:
        rnd = Round.objects.filter(state__in=[RoundState.DISPATCHED, RoundState.FAILED]).first()
        if rnd is not None:
            break
        time.sleep(0.25)
    assert rnd is not None, "the worker did not finish a round in 90 s"
    assert rnd.state == RoundState.DISPATCHED, rnd.error

    # Holds are exactly what the allocator decided for the frozen book.
    result = clear(Snapshot.load(rnd.book).book)
    assert result.digest == rnd.digest
    decided = decided_holds(rnd.pk, result)
    assert decided and dict(Hold.objects.values_list("key", "amount")) == decided
    for job in Job.objects.filter(pk__in=[int(k.rsplit(":", 1)[1]) for k in decided]):
        assert job.state == JobState.ALLOCATED
        assert Command.objects.filter(lease__job=job, kind=CommandKind.BIND, state="pending").exists()
    assert {job.tenant_id for job in Job.objects.filter(state=JobState.ALLOCATED)} == {
        world.alpha.pk,
        world.beta.pk,
        world.gamma.pk,
    }
    call_command("ledger_check", stdout=StringIO())  # exits non-zero (SystemExit) on any problem
    call_command("orphan_check", stdout=StringIO())  # no lease, GPU, command or outcome points at nothing
