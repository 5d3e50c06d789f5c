"""A moved lease end to end (docs/rounds.md §Moves): real agents on two nodes, a real job. A round's result
moves the running job to the other node: the old lease is preempted with its grace period, the new lease is
bound only once the old one has stopped, and the job resumes on the new node from its checkpoint directory
(shared by both agents here, as `GPUMARKET_CHECKPOINT_ROOT` on shared storage would be). Each lease is settled
once, for what its own agent measured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.db import transaction
from django.utils import timezone

from market.models import (
    Command,
    CommandKind,
    Job,
    JobState,
    Lease,
    LeaseState,
    PreemptReason,
    Round,
    RoundState,
)
from market.selectors.book import Snapshot
from market.services import rounds
from market.services.round_commit import commit_result
from tests.integration import test_agent_e2e
from tests.integration.test_agent_e2e import (
    env_of,
    lease_in,
    ledger_ok,
    measured_charge,
    run_round,
    settled_once,
    submit,
    wait_until,
)
from tests.market.test_reservations import _moved_result

# The node agent tests' fixtures: a worker with a short node-down time, and agents for new nodes.
worker_env = test_agent_e2e.worker_env
cluster = test_agent_e2e.cluster

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_moved_job_resumes_on_its_new_node_and_never_runs_twice(cluster: dict[str, Any]) -> None:
    a, b = cluster["agent"]("node-a"), cluster["agent"]("node-b")
    job = submit(cluster, seconds=120, grace=2)
    run_round(cluster)
    old = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{a.tail()}\n{b.tail()}")
    env_of(cluster, job, old)

    # The next round, frozen here; its result moves the lease to the other node's GPUs.
    latest = Round.objects.order_by("-slot").first()
    assert latest is not None
    rnd = Round.objects.create(slot=latest.slot + timedelta(seconds=300), period_s=300)
    rounds.round_advance(round_id=rnd.pk, stop_after=RoundState.FROZEN)
    rnd.refresh_from_db()
    snap = Snapshot.load(rnd.book)
    other = 1 - snap.book.nodes.names.index(old.node.name)
    slots = np.flatnonzero(snap.book.nodes.free[other]).tolist()
    snap, result = _moved_result(rnd, old, other, slots)
    with transaction.atomic():
        stats = commit_result(rnd=rnd, snapshot=snap, result=result, now=timezone.now())
    Round.objects.filter(pk=rnd.pk).update(state=RoundState.DISPATCHED, committed_at=timezone.now())
    assert stats.moves == 1
    new = Lease.objects.get(moved_from=old)
    assert new.node_id != old.node_id

    # The new lease binds only after the old one stopped: never both running.
    def settled() -> bool:
        states = set(Lease.objects.filter(job=job).values_list("state", flat=True))
        assert states != {LeaseState.RUNNING}, "both leases running"
        return Lease.objects.get(pk=old.pk).state == LeaseState.ENDED

    wait_until(settled, f"the old lease to stop\n{a.tail()}\n{b.tail()}")
    old.refresh_from_db()
    assert old.end_reason == "preempted" and old.preempt_reason == PreemptReason.MOVED
    bind = Command.objects.get(lease=new, kind=CommandKind.BIND)
    assert bind.created_at >= old.ended_at - timedelta(seconds=1)
    assert env_of(cluster, job, new)["resumed"] is True  # from the checkpoint the old lease wrote
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == JobState.COMPLETED, f"the job\n{a.tail()}\n{b.tail()}"
    )
    old.refresh_from_db()
    new.refresh_from_db()
    assert old.charged == measured_charge(old) and new.charged == measured_charge(new)
    settled_once(old)
    settled_once(new)
    ledger_ok()
