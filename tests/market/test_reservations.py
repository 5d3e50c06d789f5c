"""Reservations, backfill and moves on the platform (issue 34): the frozen book's expected ends and runtimes,
what the commit keeps (reservations, backfill marks, fragmentation, moved leases placed again and bound once
the old lease has stopped), and what the job page, the API, the console and the metrics say."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from allocator import MOVED, Moves, Preemptions, clear
from inventory.models import Node
from market.models import (
    Command,
    CommandKind,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
    PreemptReason,
    Reservation,
    Round,
    RoundPrice,
    RoundState,
)
from market.models.rounds import SKIP_UNCONFINED
from market.selectors.book import Snapshot, book_snapshot
from market.selectors.explain import preemption_sentence
from market.selectors.policy import market_policy
from market.selectors.reservations import job_placement
from market.services import rounds
from market.services.leases import lease_running, lease_stopped
from tests.conftest import PASSWORD, World
from tests.market.predict_helpers import finished_job
from tests.market.round_helpers import make_job
from tests.ops.test_metrics import samples, scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 5000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.starve_rounds = 0  # a blocked gang is starving at once: nodes are reserved for it
    policy.fair_reclaim = False  # the gang must wait for the nodes to drain, not reclaim them
    policy.save()
    return world


def _next_round(after: Round) -> Round:
    slot = rounds.slot_of(after.slot + timedelta(seconds=after.period_s), after.period_s)
    rnd = Round.objects.create(slot=slot, period_s=after.period_s)
    done = rounds.round_advance(round_id=rnd.pk)
    assert done.state == RoundState.DISPATCHED, done.error
    return done


def _packed(w: World) -> tuple[Round, list[Job]]:
    """beta runs two 4-GPU jobs of 10 hours, packed on one node; the other node is whole."""
    jobs = [make_job(w.beta, w.bob, gpus=4, limits={w.h100: 6}, hours=10, name=f"b{i}") for i in range(2)]
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 2, r1 and r1.error
    for job in jobs:
        lease_running(lease_id=job.leases.get().pk)
    assert len({job.leases.get().node_id for job in jobs}) == 1
    return r1, jobs


def _fragmented(w: World) -> tuple[Round, list[Job]]:
    """Then a 2-hour 4-GPU job on the other node: 4 GPUs free, no node whole; that node drains first."""
    r1, jobs = _packed(w)
    third = make_job(w.beta, w.bob, gpus=4, limits={w.h100: 6}, hours=2, name="b2")
    r2 = _next_round(r1)
    assert r2.winners == 1
    lease_running(lease_id=third.leases.get().pk)
    return r2, [*jobs, third]


def test_book_expects_lease_ends_and_bid_runtimes(market: World) -> None:
    w = market
    r1, beta = _fragmented(w)
    gang = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 6}, hours=5, name="gang")
    snap = book_snapshot(round_id=r1.pk + 1, now=timezone.now(), policy=market_policy())
    ls = snap.book.leases
    starts = {lease.pk: int(lease.started_at.timestamp()) for lease in Lease.objects.all()}
    # No finished jobs: no prediction, so each lease is expected to end at its start plus max hours.
    hours = {lease.pk: lease.max_seconds for lease in Lease.objects.all()}
    assert ls.expect_end.tolist() == [starts[pk] + hours[pk] for pk in ls.lease.tolist()]
    assert ls.backfill.tolist() == [False, False, False]
    assert snap.book.bids.job.tolist() == [gang.pk]
    assert snap.book.bids.expect_s.tolist() == [5 * 3600]
    # A stored book re-clears to the same digest.
    again = Snapshot.load(snap.dump())
    assert clear(again.book).digest == clear(snap.book).digest
    assert again.book.leases.expect_end.tolist() == ls.expect_end.tolist()
    del beta


def test_book_uses_predictions_bounded_by_max_hours(market: World) -> None:
    w = market
    running = make_job(w.alpha, w.alice, gpus=4, limits={w.h100: 6}, hours=10, name="train-8")
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 1
    lease_running(lease_id=running.leases.get().pk)
    node = w.h100.nodes.first()
    assert node is not None
    for _ in range(3):  # alpha's jobs like these ran half an hour
        finished_job(w.alpha, w.alice, node, runtime_s=1800, gpus=4, command="python train.py")
    cache.clear()  # the round's freeze cached the (then empty) finished-job sample for a minute
    pending = make_job(w.alpha, w.alice, gpus=4, limits={w.h100: 6}, hours=10, name="train-9")
    short = make_job(w.alpha, w.alice, gpus=4, limits={w.h100: 6}, hours=0.25, name="train-10")
    now = timezone.now()
    snap = book_snapshot(round_id=r1.pk + 1, now=now, policy=market_policy())
    lease = running.leases.get()
    (end,) = snap.book.leases.expect_end.tolist()
    assert lease.running_at is not None
    ran_from = lease.running_at.timestamp()
    # Predicted: about half an hour after it started running, well before its start plus 10 hours.
    assert abs(end - (ran_from + 1800)) <= 5, end - ran_from
    expect = dict(zip(snap.book.bids.job.tolist(), snap.book.bids.expect_s.tolist(), strict=True))
    assert expect[pending.pk] == 1800  # the prediction
    assert expect[short.pk] == 900  # bounded by its max hours
    assert clear(Snapshot.load(snap.dump()).book).digest == clear(snap.book).digest


def test_commit_keeps_reservations_backfill_and_fragmentation(market: World) -> None:
    w = market
    r1, _beta = _fragmented(w)
    gang = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 6}, hours=5, name="gang")
    r2 = _next_round(r1)
    held = list(Reservation.objects.filter(round=r2))
    assert held, r2.counters
    assert {r.job_id for r in held} == {gang.pk}
    assert all(r.expected_start is not None for r in held)
    price = RoundPrice.objects.get(round=r2, gpu_type=w.h100)
    assert (price.free_gpus, price.free_nodes) == (4, 0)
    placement = job_placement(Job.objects.get(pk=gang.pk))
    assert placement.kind == "reserved"
    assert placement.text.startswith("Waiting for 1 whole node; reserved ")
    assert placement.reserved_nodes == tuple(sorted(r.node.name for r in held))

    # A short job of another team fits on the reserved node before the gang is due: backfilled.
    short = make_job(w.gamma, w.carl, gpus=2, limits={w.h100: 6}, hours=1, name="short")
    r3 = _next_round(r2)
    lease = Lease.objects.filter(job=short).first()
    assert lease is not None, r3.counters
    assert lease.backfill and r3.counters.get("backfilled_gangs") == 1
    assert Reservation.objects.filter(round=r3, job=gang).exists()
    text = job_placement(Job.objects.get(pk=short.pk))
    assert text.kind == "backfilled" and "predicted end" in text.text
    # Were the gang due with the job overrunning, its lease would say why it was taken back (for a member of
    # its team, without naming the other team).
    Lease.objects.filter(pk=lease.pk).update(
        state=LeaseState.STOPPING,
        end_reason="preempted",
        preempt_reason=PreemptReason.BACKFILL_OVERRAN,
        preempted_round=r3,
        preempted_for=gang,
    )
    said = preemption_sentence(Lease.objects.select_related("gpu_type").get(pk=lease.pk))
    assert "started on a node reserved for a gang of another team, ran past its predicted end" in said, said

    # The job page and the API say it.
    client = Client()
    assert client.login(username=w.alice.username, password=PASSWORD)
    page = client.get(f"/t/{w.alpha.slug}/jobs/{gang.pk}/").content.decode()
    assert 'data-kind="reserved"' in page and "Waiting for 1 whole node" in page
    body = w.client(w.alice, tenant=w.alpha).get(f"/api/v1/tenants/alpha/jobs/{gang.pk}").json()
    assert body["placement"]["kind"] == "reserved"
    assert body["placement"]["reserved_nodes"] == list(placement.reserved_nodes)


def _moved_result(rnd: Round, lease: Lease, to_node: int, slots: list[int]) -> Any:
    """The round's own cleared result with one move added: `lease` moved to `slots` of node row `to_node`."""
    snap = Snapshot.load(rnd.book)
    result = clear(snap.book)
    row = snap.book.leases.lease.tolist().index(lease.pk)
    p = result.preemptions
    preempt = Preemptions(
        np.append(p.lease, lease.pk),
        np.append(p.row, row),
        np.append(p.reason, MOVED).astype(np.int8),
        np.append(p.for_job, -1),
    )
    moves = Moves(
        np.array([lease.pk]),
        np.array([row]),
        np.array([0, len(slots)]),
        np.full(len(slots), to_node, dtype=np.int32),
        np.array(slots, dtype=np.int32),
    )
    return snap, replace(result, preemptions=preempt, moves=moves, digest="")


def _commit_a_move(w: World, *, unconfined: bool = False) -> tuple[Lease, Any]:
    """Round 1 packs beta's two jobs on one node; round 2's result (the real one plus a move) moves the first
    job's lease to the other node. Returns the old lease and the commit's stats. unconfined: the other node's
    agent said, after the freeze, that its kernel refused the sandbox."""
    from django.db import transaction

    from market.services.round_commit import commit_result

    r1, beta = _packed(w)
    old = beta[0].leases.get()
    slot = rounds.slot_of(r1.slot + timedelta(seconds=r1.period_s), r1.period_s)
    rnd = Round.objects.create(slot=slot, period_s=r1.period_s)
    rounds.round_advance(round_id=rnd.pk, stop_after=RoundState.FROZEN)
    rnd.refresh_from_db()
    snap = Snapshot.load(rnd.book)
    other = 1 - snap.book.nodes.names.index(old.node.name)
    free = np.flatnonzero(snap.book.nodes.free[other]).tolist()[:4]
    snap, result = _moved_result(rnd, old, other, free)
    if unconfined:
        Node.objects.filter(name=snap.book.nodes.names[other]).update(unconfined=True)
    with transaction.atomic():
        stats = commit_result(rnd=rnd, snapshot=snap, result=result, now=timezone.now())
    return old, stats


def test_a_moved_lease_is_placed_again_and_bound_once_the_old_one_stopped(market: World) -> None:
    w = market
    old, stats = _commit_a_move(w)
    assert stats.moves == 1
    old.refresh_from_db()
    assert old.state == LeaseState.STOPPING and old.preempt_reason == PreemptReason.MOVED
    said = preemption_sentence(Lease.objects.select_related("gpu_type").get(pk=old.pk))
    assert "moved for a gang of" in said and "starts again on its new GPUs" in said, said
    new = Lease.objects.get(moved_from=old)
    assert new.state == LeaseState.ALLOCATED and new.job_id == old.job_id and new.price == old.price
    assert LeaseGpu.objects.filter(lease=new, active=True).count() == 4
    # Not bound while the old lease runs: the job never runs twice; and no round may preempt it meanwhile.
    assert not Command.objects.filter(lease=new).exists() and not new.preemptible
    lease_stopped(lease_id=old.pk)
    bind = Command.objects.get(lease=new)
    new.refresh_from_db()
    assert new.preemptible  # tier S, as the old lease
    assert bind.kind == CommandKind.BIND and bind.payload["job"] == old.job_id
    # Confined as any bind (issue 35): the tenant's user and the limits for its 4 GPUs, and its gang's wiring.
    job = Job.objects.get(pk=old.job_id)
    assert bind.payload["tenant"] == job.tenant.slug
    assert bind.payload["cpus"] == 4 * float(settings.JOB_CPUS_PER_GPU_DEFAULT)
    assert bind.payload["memory_mb"] == int(4 * 1024 * float(settings.JOB_MEMORY_GB_PER_GPU_DEFAULT))
    assert bind.payload["pids"] == settings.JOB_PIDS_MAX and bind.payload["log_max_bytes"] > 0
    assert bind.payload["gang"]["nnodes"] == 1 and bind.payload["gang"]["gpus_per_node"] == 4
    assert job.state == JobState.ALLOCATED
    assert job_placement(job).kind == "moved"
    # Each lease holds its own money: the old one settled, the new one held.
    old.refresh_from_db()
    assert old.state == LeaseState.ENDED and old.charged is not None


def test_an_untrusted_job_is_not_moved_onto_a_node_without_the_sandbox(market: World) -> None:
    old, stats = _commit_a_move(market, unconfined=True)
    old.refresh_from_db()
    # The old lease is still preempted (its GPUs were wanted), the job queued again, no lease on the new node.
    assert old.state == LeaseState.STOPPING and not Lease.objects.filter(moved_from=old).exists()
    assert stats.moves_skipped == {SKIP_UNCONFINED: 1}, stats


def test_a_moved_job_cancelled_meanwhile_never_starts_again(market: World) -> None:
    from market.services.jobs import job_cancel

    w = market
    old, _stats = _commit_a_move(w)
    new = Lease.objects.get(moved_from=old)
    job_cancel(job=Job.objects.get(pk=old.job_id), actor=w.bob)
    lease_stopped(lease_id=old.pk)
    new.refresh_from_db()
    assert new.state == LeaseState.ENDED and new.end_reason == "cancelled" and new.charged == 0
    assert not Command.objects.filter(lease=new).exists()
    assert not LeaseGpu.objects.filter(lease=new, active=True).exists()
    assert Job.objects.get(pk=old.job_id).state == JobState.CANCELLED


def test_metrics_and_console(market: World, settings: Any) -> None:
    w = market
    r1, _beta = _fragmented(w)
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 6}, hours=5, name="gang")
    _next_round(r1)
    settings.METRICS_TOKEN = "reservations-metrics-token"
    got = {name for name, _labels in samples(scrape(HTTP_AUTHORIZATION="Bearer reservations-metrics-token"))}
    for name in (
        "gpumarket_reserved_idle_gpu_seconds_total",
        "gpumarket_backfilled_gpu_seconds_total",
        "gpumarket_moves_total",
        "gpumarket_moved_lost_gpu_seconds_total",
    ):
        assert name in got, name
    client = Client()
    assert client.login(username=w.admin.username, password=PASSWORD)
    page = client.get("/console/fairness/").content.decode()
    assert 'data-field="reservations"' in page and "job " in page
    assert "whole free nodes" in page and 'data-field="moves"' in page
