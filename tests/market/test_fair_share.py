"""The fair-share history on the database: written by the round commit, frozen into the next book, decayed and
accrued once per round, and its policy knobs (allocator/fairshare.py; docs/rounds.md §Fair-share history)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import allocator
from accounts.models import AuditEvent
from allocator import Policy, clear, fairshare
from market.models import FairShareRound, FairShareUsage, MarketPolicy, Round, RoundState
from market.selectors.book import Snapshot, book_snapshot
from market.selectors.policy import market_policy
from market.services import rounds
from market.services.fair_share import fair_share_record
from tests.conftest import World
from tests.market.round_helpers import make_job

POLICY = "/api/v1/policy"


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 1, size=8)
    for tenant in (world.alpha, world.beta):
        world.fund(tenant, 1000)
    return world


def owed(world: World) -> dict[str, float]:
    return {
        slug: hours
        for slug, hours in FairShareUsage.objects.filter(gpu_type=world.h100).values_list(
            "tenant__slug", "owed_gpu_hours"
        )
    }


def earlier(seconds: int) -> None:
    """As if the history had been written ``seconds`` before: the next round counts that much time."""
    for row in FairShareUsage.objects.all():
        row.updated_at -= timedelta(seconds=seconds)
        row.save(update_fields=["updated_at"])


def test_the_policy_defaults_are_the_clearings_own() -> None:
    assert MarketPolicy._meta.get_field("fair_share_half_life_s").default == Policy().fair_share_half_life_s
    assert MarketPolicy._meta.get_field("fair_share_payback_s").default == Policy().fair_share_payback_s


def test_a_round_commit_writes_the_history_and_the_rounds_figures(market: World) -> None:
    w = market
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    rnd = rounds.round_tick()
    assert rnd is not None
    assert rnd.state == RoundState.DISPATCHED, rnd.error
    # A row per tenant and type, for this round: no earlier history, so what the round leaves counts for one
    # round period: the tenant left waiting for 8 is owed its target, the one holding 8 is above its own.
    assert FairShareUsage.objects.filter(round=rnd).count() == 3 * 2
    period_h = rnd.period_s / 3600
    figures = {r.tenant.slug: r for r in FairShareRound.objects.filter(round=rnd, gpu_type=w.h100)}
    # As the round leaves them (as the simulator samples): one holds the node, the other still waits for 8.
    won = next(s for s, f in figures.items() if f.held)
    lost = "beta" if won == "alpha" else "alpha"
    assert (figures[won].held, figures[won].waiting, figures[won].smallest, figures[won].capacity) == (
        8,
        0,
        None,
        8,
    )
    assert (figures[lost].held, figures[lost].waiting, figures[lost].smallest) == (0, 8, 8)
    # Both want 8 of 8 GPUs; by weight (1 and 2) the targets are 8/3 and 16/3.
    assert figures["alpha"].target == pytest.approx(8 / 3, abs=1e-3)
    assert figures["beta"].target == pytest.approx(16 / 3, abs=1e-3)
    got = owed(w)
    for slug, f in figures.items():
        assert got[slug] == pytest.approx((f.target - f.held) * period_h, abs=1e-3)  # target kept to 4 places


def test_a_second_round_decays_and_accrues_and_the_next_book_reads_it_back(market: World) -> None:
    w = market
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    first = rounds.round_tick()
    assert first is not None and first.winners == 1
    # Seed a history to see it decay: alpha was owed 10 GPU-hours, 300 s before the next round.
    FairShareUsage.objects.filter(tenant=w.alpha, gpu_type=w.h100).update(owed_gpu_hours=10.0)
    first_owed = owed(w)
    earlier(300)
    second = rounds.round_tick(now=timezone.now() + timedelta(seconds=first.period_s))
    assert second is not None and second.pk != first.pk and second.state == RoundState.DISPATCHED
    book = Snapshot.load(second.book).book
    a, h = book.tenants.names.index("alpha"), book.types.names.index("H100")
    assert book.tenants.owed[a, h] == 10.0  # frozen from the database into the book
    demand = fairshare.book_demand(book, allocator.clear(book))  # as the round leaves it
    capacity = [8.0]
    target = fairshare.targets(
        demand.held, demand.waiting, book.tenants.guarantee, book.tenants.weight, capacity
    )
    got = owed(w)
    for slug in ("alpha", "beta"):
        i = book.tenants.names.index(slug)
        gap = (target[i, h] - demand.held[i, h]) * second.period_s / 3600
        base = 10.0 if slug == "alpha" else first_owed[slug]
        assert got[slug] == pytest.approx(base * 0.5 ** (300 / 86400) + gap, abs=0.01)
    # One of them holds the node: it got beyond its target and is owed less; the other more.
    winner = next(s for s in ("alpha", "beta") if demand.held[book.tenants.names.index(s), h] == 8)
    loser = "beta" if winner == "alpha" else "alpha"
    assert got[winner] < first_owed[winner]
    assert got[loser] > first_owed[loser] * 0.5 ** (300 / 86400)
    # A restart: a new book frozen now reads the rows back.
    again = book_snapshot(round_id=second.pk + 1, now=timezone.now(), policy=market_policy()).book
    assert again.tenants.owed[a, h] == pytest.approx(got["alpha"])
    # The stored book carries owed, so clearing it again gives the committed digest.
    assert clear(Snapshot.load(second.book).book).digest == second.digest


def test_a_repeated_commit_does_not_accrue_twice(market: World) -> None:
    w = market
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    first = rounds.round_tick()
    assert first is not None
    earlier(600)
    second = rounds.round_tick(now=timezone.now() + timedelta(seconds=first.period_s))
    assert second is not None
    after = owed(w)
    assert any(after.values())
    for rnd in (second, first):  # a retried commit, then a stale one
        book = Snapshot.load(rnd.book).book
        fair_share_record(rnd=rnd, book=book, result=allocator.clear(book))
    assert owed(w) == after
    assert FairShareRound.objects.filter(round=second).count() == 2


def test_a_failed_commit_writes_no_history_and_its_retry_writes_it_once(
    market: World, monkeypatch: Any
) -> None:
    w = market
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    rnd = Round.objects.create(slot=rounds.slot_of(timezone.now(), 300), period_s=300)
    import market.services.rounds as rs
    from market.services.fair_share import fair_share_record as real  # what rounds calls, patched there below

    def boom(**kwargs: Any) -> None:
        real(**kwargs)
        raise RuntimeError("worker killed")

    monkeypatch.setattr(rs, "fair_share_record", boom)
    with pytest.raises(RuntimeError):
        rounds.round_advance(round_id=rnd.pk)
    assert not FairShareUsage.objects.exists() and not FairShareRound.objects.exists()
    monkeypatch.setattr(rs, "fair_share_record", real)
    done = rounds.round_advance(round_id=rnd.pk)
    assert done.state == RoundState.DISPATCHED
    assert FairShareUsage.objects.filter(round=rnd).count() == 6


def test_no_half_life_keeps_no_history(market: World) -> None:
    w = market
    MarketPolicy.objects.update_or_create(singleton=1, defaults={"round_seconds": 300})
    MarketPolicy.objects.update(fair_share_half_life_s=0)
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    make_job(w.beta, w.bob, gpus=8, limits={w.h100: 5})
    first = rounds.round_tick()
    assert first is not None
    assert Snapshot.load(first.book).book.policy.fair_share_half_life_s == 0
    earlier(300)
    rounds.round_tick(now=timezone.now() + timedelta(seconds=first.period_s))
    assert set(owed(w).values()) == {0.0}


def test_the_knobs_reach_the_book_and_are_audited(world: World) -> None:
    client = world.client(world.admin)
    resp = client.patch(POLICY, {"fair_share_half_life_s": 3600, "fair_share_payback_s": 600}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["fair_share_half_life_s"] == 3600
    policy = book_snapshot(round_id=1, now=timezone.now(), policy=market_policy()).book.policy
    assert (policy.fair_share_half_life_s, policy.fair_share_payback_s) == (3600, 600)
    event = AuditEvent.objects.get(action="policy.update")
    assert event.detail == {
        "fair_share_half_life_s": [86400, 3600],
        "fair_share_payback_s": [Policy().fair_share_payback_s, 600],
    }


@pytest.mark.parametrize(
    "body, field",
    [
        ({"fair_share_half_life_s": -1}, "fair_share_half_life_s"),
        ({"fair_share_half_life_s": 31 * 86400}, "fair_share_half_life_s"),
        ({"fair_share_payback_s": 0}, "fair_share_payback_s"),
        ({"fair_share_payback_s": "soon"}, "fair_share_payback_s"),
    ],
)
def test_bad_knob_values_get_400_naming_the_field(world: World, body: dict[str, Any], field: str) -> None:
    resp = world.client(world.admin).patch(POLICY, body, format="json")
    assert resp.status_code == 400 and field in resp.json()["fields"], resp.content
    assert market_policy().fair_share_payback_s == Policy().fair_share_payback_s


def test_the_console_form_shows_and_refuses_the_knobs(world: World) -> None:
    from django.test import Client

    from tests.frontend.conftest import login

    client = login(Client(), world.admin)
    page = client.get("/console/market/").content.decode()
    assert 'name="fair_share_half_life_s"' in page and 'name="fair_share_payback_s"' in page
    fields = {
        "round_seconds": "300", "price_step_bp": "500", "min_runtime_s": "600", "default_grace_s": "120",
        "starve_rounds": "5", "max_reservations": "1", "max_reserved_pct": "10", "fair_reclaim": "1",
        "retention_days": "30", "energy_price_kwh": "0", "idle_util_pct": "0", "idle_seconds": "1800",
        "fair_share_half_life_s": "86400", "fair_share_payback_s": "0",
        "reserve-H100": "2", "max-H100": "20", "reserve-A100": "1.2", "max-A100": "12",
    }  # fmt: skip
    bad = client.post("/console/market/", fields)
    assert bad.status_code == 400 and 'id="id_fair_share_payback_s-error">must be between 60' in (
        bad.content.decode()
    )
    ok = client.post(
        "/console/market/", {**fields, "fair_share_half_life_s": "7200", "fair_share_payback_s": "7200"}
    )
    assert ok.status_code == 302 and market_policy().fair_share_half_life_s == 7200
    assert market_policy().fair_share_payback_s == 7200
