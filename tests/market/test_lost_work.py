"""Preemption that costs less (the freeze's side is in tests/market/test_book.py): the round commit records the work a preemption throws away (Lease.lost_gpu_s), and the job API, the portal, the console's round
page and the metrics report it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from market.models import Lease, LeaseState, Round, RoundState
from market.selectors.book import Snapshot, book_snapshot
from market.selectors.explain import lease_end_sentence
from market.selectors.jobs import job_detail
from market.selectors.lost_work import book_seconds, gpu_time, lost_gpu_seconds
from market.selectors.policy import market_policy
from market.services import rounds
from market.services.guarantees import guarantee_set
from market.services.leases import lease_running, lease_stopped
from tests.conftest import PASSWORD, World
from tests.market.round_helpers import make_job
from tests.ops.test_metrics import samples, scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.save()
    return world


def _beta_fills_the_cluster(w: World) -> tuple[Round, list[Lease]]:
    """beta borrows all 16 GPUs as two 8-GPU leases that have run for an hour."""
    jobs = [make_job(w.beta, w.bob, gpus=8, limits={w.h100: 6}, name=f"b{i}") for i in range(2)]
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 2, r1 and r1.error
    hour_ago = timezone.now() - timedelta(hours=1)
    for job in jobs:
        lease_running(lease_id=job.leases.get().pk)
    Lease.objects.filter(job__in=jobs).update(started_at=hour_ago, running_at=hour_ago)
    return r1, [job.leases.get() for job in jobs]


def _next_round(after: Round) -> Round:
    slot = rounds.slot_of(after.slot + timedelta(seconds=after.period_s), after.period_s)
    done = rounds.round_advance(round_id=Round.objects.create(slot=slot, period_s=after.period_s).pk)
    assert done.state == RoundState.DISPATCHED, done.error
    return done


def _checkpoint(lease: Lease, at: datetime) -> None:
    Lease.objects.filter(pk=lease.pk).update(last_checkpoint_at=at)


def _reclaim(w: World) -> tuple[Round, Lease, Lease, datetime]:
    """alpha's guarantee takes back 8 of beta's GPUs. b0 saved its work 5 minutes ago, b1 never: reclaim takes
    b0, which loses the least."""
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    r1, (b0, b1) = _beta_fills_the_cluster(w)
    saved = timezone.now() - timedelta(minutes=5)
    _checkpoint(b0, saved)
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 3}, name="alpha-guaranteed")
    before = timezone.now()
    r2 = _next_round(r1)
    assert r2.preemptions == 1, r2.counters
    victim = Lease.objects.get(state=LeaseState.STOPPING)
    return r2, victim, b1, before


def test_the_commit_records_the_work_lost_and_reclaim_takes_the_lease_that_loses_least(market):
    w = market
    r2, victim, kept, before = _reclaim(w)
    assert victim.preempted_round_id == r2.pk
    assert victim.job.name == "b0" and kept.pk != victim.pk
    assert victim.last_checkpoint_at is not None and victim.lost_gpu_s is not None
    since_checkpoint = 8 * (before - victim.last_checkpoint_at).total_seconds()
    # Whole seconds on the book's clock: at most one second (8 GPU-seconds) below the exact figure.
    assert since_checkpoint - 8 <= victim.lost_gpu_s <= since_checkpoint + 8 * 5
    # One figure: the one reclaim ranked the victims on (Leases.lost_gpu_s over the round's frozen book),
    # taken at the moment the commit stopped it, is the one the commit recorded, for both of beta's leases.
    assert victim.stop_requested_at is not None
    leases = Snapshot.load(r2.book).book.leases
    at = book_seconds(victim.stop_requested_at)
    ranked = dict(zip(leases.lease.tolist(), leases.lost_gpu_s(at).tolist(), strict=True))
    assert ranked[victim.pk] == victim.lost_gpu_s
    assert ranked[kept.pk] == lost_gpu_seconds(kept, victim.stop_requested_at) > ranked[victim.pk]
    kept.refresh_from_db()
    assert kept.lost_gpu_s is None  # not preempted: nothing recorded


def test_the_api_portal_console_and_metrics_show_the_work_lost(market, settings: Any):
    w = market
    r2, victim, _, _ = _reclaim(w)
    lost = victim.lost_gpu_s
    assert lost is not None and 2400 <= lost < 2400 + 8 * 5
    words = gpu_time(lost)  # "40 GPU-minutes" (41 on a slow machine)
    assert words in ("40 GPU-minutes", "41 GPU-minutes")
    api = w.client(w.bea).get(f"/api/v1/tenants/beta/jobs/{victim.job_id}")
    assert api.status_code == 200
    lease = next(x for x in api.json()["leases"] if x["id"] == victim.pk)
    p = lease["preemption"]
    assert (p["lost_gpu_s"], p["lost_gpu_hours"], p["lost_work"]) == (lost, round(lost / 3600, 4), words)
    assert f", losing {words} of work since its last checkpoint: the job is sent SIGTERM" in p["text"]
    assert lease["last_checkpoint_at"] is not None

    assert victim.stop_requested_at is not None

    lease_stopped(lease_id=victim.pk, now=victim.stop_requested_at + timedelta(seconds=20))
    job = job_detail(tenant=w.beta, job_id=victim.job_id)
    assert job is not None
    row = next(x for x in job.lease_rows if x.pk == victim.pk)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    sentence = lease_end_sentence(row, gpu_seconds=160.0, exit_code=None)
    assert f"(a borrowed lease may be taken back), losing {words} of work since its last checkpoint; " in (
        sentence
    )
    client = Client()
    client.login(username="bea", password=PASSWORD)
    page = client.get(f"/t/beta/jobs/{victim.job_id}/").content.decode()
    assert f"losing {words} of work since its last checkpoint" in page

    client.login(username="root", password=PASSWORD)
    page = client.get(f"/console/rounds/{r2.pk}/").content.decode()
    row_html = page.split(f'<tr data-lease="{victim.pk}">')[1].split("</tr>")[0]
    assert f'<td class="num" data-field="lost">{words}</td>' in row_html
    assert f"{words} in all ({round(lost / 3600, 3)} GPU-hours): beta {words}." in page

    settings.METRICS_TOKEN = "t0ken-for-scrape"
    s = samples(scrape(HTTP_AUTHORIZATION="Bearer t0ken-for-scrape"))
    assert s["gpumarket_preemption_lost_gpu_seconds_total", (("tenant", "beta"),)] == pytest.approx(lost)
    assert ("gpumarket_preemption_lost_gpu_seconds_total", (("tenant", "alpha"),)) not in s


def test_a_lease_that_never_ran_loses_nothing_and_the_sentence_says_nothing_of_it(market):
    w = market
    make_job(w.beta, w.bob, gpus=8, limits={w.h100: 6})
    r1 = rounds.round_tick()
    assert r1 is not None
    lease = Lease.objects.get(tenant=w.beta)
    assert lease.running_at is None
    assert lost_gpu_seconds(lease, timezone.now() + timedelta(hours=1)) == 0.0
    # The clearing ranks it the same way: its book's starting point is the round's now, so nothing is at stake.
    now = timezone.now() + timedelta(hours=1)
    leases = book_snapshot(round_id=99, now=now, policy=market_policy()).book.leases
    assert leases.lease.tolist() == [lease.pk]
    assert leases.checkpoint.tolist() == [book_seconds(now)] and leases.lost_gpu_s(
        book_seconds(now)
    ).tolist() == [0]


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0 GPU-seconds"),
        (0.4, "under 1 GPU-second"),  # measured, so not nothing
        (1, "1 GPU-second"),
        (15, "15 GPU-seconds"),  # the 15-second job that read "0.00 GPU-hours measured"
        (42.4, "42 GPU-seconds"),
        (59.6, "1 GPU-minute"),
        (60, "1 GPU-minute"),
        (90, "1.5 GPU-minutes"),
        (150, "2.5 GPU-minutes"),
        (720, "12 GPU-minutes"),
        (3569, "59 GPU-minutes"),
        (3599, "1 GPU-hour"),
        (3600, "1 GPU-hour"),
        (3600 * 2, "2 GPU-hours"),
        (4500, "1.25 GPU-hours"),
        (5400, "1.5 GPU-hours"),
        (3600 * 12.34, "12.3 GPU-hours"),
        (3600 * 2500, "2,500 GPU-hours"),
    ],
)
def test_gpu_time_reads_in_a_unit_that_fits(seconds: float, text: str) -> None:
    assert gpu_time(seconds) == text


@pytest.mark.parametrize(
    ("micro", "text"),
    [
        (0, "0.00"),
        (4_167, "0.004167"),  # a 15-second job's charge: rounds to 0.00, so written exactly
        (1, "0.000001"),
        (-4_000, "-0.004"),
        (5_000, "0.01"),  # rounds half up to a cent: not zero
        (12_345_678, "12.35"),
        (1_234_500_000, "1,234.50"),
    ],
)
def test_credits_that_round_to_zero_are_not_shown_as_zero(micro: int, text: str) -> None:
    from config.money import format_fixed

    assert format_fixed(micro) == text
