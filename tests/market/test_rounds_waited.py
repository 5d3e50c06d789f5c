"""Rounds waited, derived from each job's wait mark instead of written on every loser (market.selectors.waiting).

What a job's count means, round by round: +1 for every committed round whose book held it and that it did
not win (losers, and winners dropped at commit); 0 once allocated and again when a preempted job comes back;
frozen at cancel; unchanged by a round that left it out of its book (inactive tenant, pending only since the
freeze) or that failed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from market.models import CommandKind, EndReason, Job, JobState, Lease, Round, RoundState
from market.selectors.book import book_snapshot
from market.selectors.jobs import job_list
from market.selectors.policy import market_policy
from market.selectors.waiting import rounds_waited_of
from market.services import rounds
from market.services.jobs import job_cancel
from market.services.leases import lease_request_stop, lease_stopped
from tests.market.round_helpers import make_job


@pytest.fixture
def market(world):
    world.nodes(world.h100, 1, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 1000)
    return world


def _round(stop_after: RoundState | None = None) -> Round:
    """The next round (one period after the last), advanced through its steps."""
    slot = timezone.now() + timedelta(days=Round.objects.count())
    rnd = Round.objects.create(slot=rounds.slot_of(slot, 300), period_s=300)
    return rounds.round_advance(round_id=rnd.pk, stop_after=stop_after)


def _waited(job: Job) -> int:
    job.refresh_from_db()
    return rounds_waited_of(job)


def _listed(job: Job) -> int:
    """The count as the job list annotates it (API and portal lists)."""
    # The annotation itself (rounds_waited(j) would count afresh were it missing).
    return next(int(j.__dict__["rounds_waited"]) for j in job_list(tenant=job.tenant) if j.pk == job.pk)


def test_losers_count_each_round_and_winners_start_again(market):
    w = market
    big = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 9})
    loser = make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    assert _waited(loser) == 0
    assert _round().winners == 1
    assert _waited(big) == 0 and Job.objects.get(pk=big.pk).state == JobState.ALLOCATED
    assert _waited(loser) == 1 == _listed(loser)
    _round()
    _round()
    assert _waited(loser) == 3 == _listed(loser)
    # The book the next round clears carries the same count for the allocator's starvation guard.
    snapshot = book_snapshot(
        round_id=Round.objects.latest("pk").pk + 1, now=timezone.now(), policy=market_policy()
    )
    assert snapshot.book.bids.job.tolist() == [loser.pk]
    assert snapshot.book.bids.waited.tolist() == [3]


def test_failed_round_does_not_count(market, monkeypatch):
    w = market
    job = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 1})  # below the reserve: always loses
    _round()

    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(rounds, "commit_result", broken)
    rnd = Round.objects.create(slot=timezone.now() + timedelta(days=30), period_s=300)
    for _ in range(rounds.MAX_ATTEMPTS - 1):
        with pytest.raises(RuntimeError):
            rounds.round_advance(round_id=rnd.pk)
    assert rounds.round_advance(round_id=rnd.pk).state == RoundState.FAILED
    assert _waited(job) == 1
    monkeypatch.undo()
    _round()
    assert _waited(job) == 2


def test_job_pending_only_since_the_freeze_does_not_count_that_round(market):
    w = market
    first = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 1})
    frozen = _round(stop_after=RoundState.FROZEN)
    # Became pending while the round was frozen, its mark read before the freeze committed: the worst case.
    late = make_job(w.gamma, w.carl, gpus=1, limits={w.h100: 1})
    Job.objects.filter(pk=late.pk).update(wait_round=frozen.pk - 1)
    done = rounds.round_advance(round_id=frozen.pk)
    assert done.state == RoundState.DISPATCHED
    assert _waited(first) == 1
    assert _waited(late) == 0 == _listed(late)
    _round()
    assert (_waited(first), _waited(late)) == (2, 1)


def test_inactive_tenant_keeps_its_count(market):
    w = market
    job = make_job(w.gamma, w.carl, gpus=1, limits={w.h100: 1})
    other = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 1})  # keeps the rounds' books non-empty
    _round()
    w.gamma.active = False
    w.gamma.save(update_fields=["active"])
    _round()
    _round()
    assert _waited(job) == 1
    w.gamma.active = True
    w.gamma.save(update_fields=["active"])
    _round()
    assert (_waited(job), _waited(other)) == (2, 4)


def test_cancel_freezes_the_count(market):
    w = market
    job = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 1})
    _round()
    _round()
    job_cancel(job=job, actor=w.bob)
    _round()
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert _waited(job) == 2 == _listed(job)


def test_preempted_job_back_in_queue_starts_from_zero(market):
    w = market
    job = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 9})
    other = make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    _round()
    _round()
    assert (_waited(job), _waited(other)) == (0, 2)
    lease = Lease.objects.get(job=job)
    fence = Round.objects.latest("pk").pk
    lease_request_stop(lease_id=lease.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=fence)
    lease_stopped(lease_id=lease.pk)
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    assert _waited(job) == 0
    _round()  # it outbids the other again
    assert Job.objects.get(pk=job.pk).state == JobState.ALLOCATED
    assert (_waited(job), _waited(other)) == (0, 3)
