"""Faults in the round's workers (issue 19 §Faults), with real Celery worker processes on Redis and the test
PostgreSQL database. Each ends with the round finished once, its result hash the one its frozen book gives,
holds exactly what it decided, no job with two live leases, and ledger_check passing.

- a worker SIGKILLed after FROZEN, after CLEARED, and in the middle of the commit (its transaction lost):
  the next beat's tick, on another worker, finishes the round;
- two beats at once on two workers, then the round's task delivered twice: one round, written once.
"""

from __future__ import annotations

import signal
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Count, Sum

from allocator import clear
from market.models import Hold, Job, JobState, Lease, MarketPolicy, Round, RoundState
from market.models.policy import DAY
from market.selectors.book import Snapshot
from tests.market.round_helpers import make_job
from tests.round_holds import decided_holds
from tests.workers import start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

# Where the killed worker leaves the round: the step it died in is lost, those before it are kept.
LEFT_AT = {
    "AFTER_FROZEN": RoundState.FROZEN,
    "AFTER_CLEARED": RoundState.CLEARED,
    "MID_COMMIT": RoundState.CLEARED,
}


@pytest.fixture
def busy(world: Any) -> Any:
    # One round period spans the whole test: with the default 300 s, a slow start of the next worker (a loaded
    # machine) could let its tick fall into the next period and open a second round beside the one it finishes.
    MarketPolicy.objects.update_or_create(singleton=1, defaults={"round_seconds": DAY})
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 1000)
    people = [(world.alpha, world.alice), (world.beta, world.bob), (world.gamma, world.carl)]
    for i in range(24):
        tenant, user = people[i % 3]
        make_job(tenant, user, gpus=1 + i % 3, limits={world.h100: 2.5 + (i % 5) / 2}, name=f"j{i}")
    return world


def _finished(rnd_id: int) -> Round | None:
    rnd = Round.objects.get(pk=rnd_id)
    return rnd if rnd.state in (RoundState.DISPATCHED, RoundState.FAILED) else None


def _assert_written_once(rnd: Round) -> None:
    assert rnd.state == RoundState.DISPATCHED, rnd.error
    result = clear(Snapshot.load(rnd.book).book)
    assert result.digest == rnd.digest
    decided = decided_holds(rnd.pk, result)
    assert decided and dict(Hold.objects.values_list("key", "amount")) == decided
    winners = len(list(result.winner_records()))
    assert Lease.objects.count() == winners == Job.objects.filter(state=JobState.ALLOCATED).count()
    # Each lease records its share; the tenant's shares sum to its one hold (held once, however resumed).
    shares = Lease.objects.values("hold_key").annotate(total=Sum("hold_share"))
    assert {row["hold_key"]: row["total"] for row in shares} == decided
    assert not Lease.objects.values("job").annotate(n=Count("id")).filter(n__gt=1).exists()
    call_command("ledger_check", stdout=StringIO())  # SystemExit on any problem
    call_command("orphan_check", stdout=StringIO())  # no lease, GPU, command or outcome points at nothing


@pytest.mark.parametrize("point", LEFT_AT)
def test_a_worker_killed_mid_round_leaves_it_for_the_next(busy: Any, tmp_path: Path, point: str) -> None:
    from market.tasks import round_tick

    queue, log = f"test-{uuid.uuid4().hex[:12]}", tmp_path / "worker.log"
    doomed = start_worker(queue, log, kill_point=point)
    try:
        round_tick.apply_async(queue=queue)
        wait_for(lambda: doomed.poll() is not None, 90, f"the worker to die {point}")
        assert doomed.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    finally:
        stop_worker(doomed)
    rnd = Round.objects.get()
    assert rnd.state == LEFT_AT[point]
    assert not Lease.objects.exists() and not Hold.objects.exists()  # a lost commit wrote nothing
    stored_digest = rnd.digest

    survivor = start_worker(queue, log)
    try:
        round_tick.apply_async(queue=queue)  # the next beat
        rnd = wait_for(lambda: _finished(rnd.pk), 90, "the next worker to finish the round")
    finally:
        stop_worker(survivor)
    assert Round.objects.count() == 1
    if stored_digest:
        assert rnd.digest == stored_digest
    _assert_written_once(rnd)


def test_two_beats_at_once_and_a_task_delivered_twice(busy: Any, tmp_path: Path) -> None:
    from market.tasks import round_advance, round_tick

    queue, log = f"test-{uuid.uuid4().hex[:12]}", tmp_path / "worker.log"
    workers = [start_worker(queue, log) for _ in range(2)]
    try:
        for _ in range(2):
            round_tick.apply_async(queue=queue)
        rnd = wait_for(lambda: Round.objects.filter(state=RoundState.DISPATCHED).first(), 90, "a round")
        before = (Lease.objects.count(), Hold.objects.count(), rnd.digest)
        for _ in range(2):
            round_advance.apply_async(args=(rnd.pk,), queue=queue)
        wait_for(lambda: _broker_empty(queue), 60, "both deliveries to be taken")
    finally:
        for w in workers:
            stop_worker(w)  # a warm shutdown: each finishes the task it holds
    assert (Lease.objects.count(), Hold.objects.count(), Round.objects.get().digest) == before
    assert Round.objects.count() == 1
    _assert_written_once(Round.objects.get())


def _broker_empty(queue: str) -> bool:
    from config.celery import app

    with app.connection_for_write() as conn:
        return bool(conn.default_channel.client.llen(queue) == 0)  # type: ignore[attr-defined]  # kombu's stubs type the channel generically; the Redis transport's has its client
