"""Fair-share figures for the console, the team dashboard and /metrics, from per-round rows
(market.selectors.fair_share): table tests over hand-written rounds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from market.models import FairShareRound, FairShareUsage, Round, RoundLoss, RoundState
from market.selectors.fair_share import fair_share_report, team_standing
from tests.conftest import World
from tests.market.round_helpers import make_job

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Row:
    """One tenant's figures in one H100 round of 8 GPUs: held, waiting, smallest gang, target."""

    tenant: str
    held: int
    waiting: int
    smallest: int | None
    target: float


def store(world: World, rounds: list[list[Row]], *, start: datetime = T0, period_s: int = 300) -> list[Round]:
    tenants = {t.slug: t for t in (world.alpha, world.beta, world.gamma)}
    made = []
    for r, rows in enumerate(rounds):
        slot = start + timedelta(seconds=r * period_s)
        rnd = Round.objects.create(slot=slot, period_s=period_s, state=RoundState.DISPATCHED)
        made.append(rnd)
        for row in rows:
            FairShareRound.objects.create(
                round=rnd,
                slot=slot,
                tenant=tenants[row.tenant],
                gpu_type=world.h100,
                held=row.held,
                waiting=row.waiting,
                smallest=row.smallest,
                target=row.target,
                capacity=8,
            )
    return made


# A tenant's (compliance 24 h, 1 h, per round, shortfall): None where it had no demand.
Figures = tuple[float | None, ...]


def by_tenant(report) -> dict[str, Figures]:
    return {
        t.tenant: (t.compliance_24h, t.compliance_1h, t.round_compliance, t.shortfall) for t in report.tenants
    }


CASES: dict[str, tuple[list[list[Row]], str | None, dict[str, Figures], tuple[str, str]]] = {
    # beta waits for one gang of 8 with a target of 4: short every round, but no gang of its fits its share.
    "gangs larger than the target": (
        [[Row("alpha", 8, 0, None, 4), Row("beta", 0, 8, 8, 4)]] * 3,
        None,
        {"alpha": (None, None, None, 0.0), "beta": (0.0, 0.0, 1.0, 0.5)},
        ("beta", "larger than what remains of its fair-share target"),
    ),
    # Both get their targets.
    "within target": (
        [[Row("alpha", 4, 4, 4, 4), Row("beta", 4, 2, 2, 4)]] * 2,
        None,
        {"alpha": (1.0, 1.0, 1.0, 0.0), "beta": (1.0, 1.0, 1.0, 0.0)},
        ("alpha", "within its fair-share target"),
    ),
    # beta's 1-GPU jobs could have run within its share: it lost them by price.
    "outbid": (
        [[Row("alpha", 8, 4, 4, 4), Row("beta", 0, 4, 1, 4)]] * 2,
        "outbid",
        {"alpha": (1.0, 1.0, 1.0, 0.0), "beta": (0.0, 0.0, 0.0, 0.5)},
        ("beta", "bid below the posted price"),
    ),
    # beta's bids found every GPU held by guaranteed and borrowed jobs: busy, not a price it could have paid.
    "busy": (
        [[Row("alpha", 8, 4, 4, 4), Row("beta", 0, 4, 1, 4)]] * 2,
        "busy",
        {},
        ("beta", "found every GPU held or claimed by guaranteed and borrowed jobs"),
    ),
    "out of budget": (
        [[Row("alpha", 8, 4, 4, 4), Row("beta", 0, 4, 1, 4)]] * 2,
        "over_budget",
        {},
        ("beta", "ran out of budget"),
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(CASES))
def test_fair_share_report(world: World, case: str) -> None:
    rounds, reason, want, (worst, why) = CASES[case]
    made = store(world, rounds)
    if reason:
        # What the round commit counts for the diagnosis (a loss like the round before writes no outcome row).
        RoundLoss.objects.create(round=made[0], tenant=world.beta, reason=reason, bids=1)
    report = fair_share_report(since=T0 - timedelta(hours=1))
    assert report.rounds == len(rounds)
    got = by_tenant(report)
    for slug, figures in want.items():
        assert got[slug] == figures, slug
    assert report.worst == worst and why in report.why
    alpha = next(s for s in report.series if s.tenant == "alpha")
    assert (alpha.gpu_type, len(alpha.slots)) == ("H100", len(rounds))
    assert alpha.target == [rounds[i][0].target for i in range(len(rounds))]


@pytest.mark.django_db
def test_windows_split_by_the_hour_and_the_day(world: World) -> None:
    # Two hours: in the first beta gets its target, in the second nothing.
    good = [Row("alpha", 4, 4, 4, 4), Row("beta", 4, 4, 4, 4)]
    bad = [Row("alpha", 8, 4, 4, 4), Row("beta", 0, 4, 4, 4)]
    store(world, [good] * 12 + [bad] * 12)
    report = fair_share_report(since=T0)
    beta = by_tenant(report)["beta"]
    assert beta[0] == 0.0  # one day: 48 of 96 target GPU-rounds held, below 95%
    assert beta[1] == 0.5  # two hours, one complied
    assert beta[2] == 0.5 and report.shortfall == pytest.approx(0.25)


@pytest.mark.django_db
def test_owed_and_the_team_line(world: World) -> None:
    rnd = store(world, [[Row("alpha", 0, 4, 4, 4)]], start=timezone.now() - timedelta(minutes=5))[0]
    FairShareUsage.objects.create(
        tenant=world.alpha, gpu_type=world.h100, owed_gpu_hours=1.234, updated_at=rnd.slot, round=rnd
    )
    FairShareUsage.objects.create(
        tenant=world.alpha, gpu_type=world.a100, owed_gpu_hours=-0.5, updated_at=rnd.slot, round=rnd
    )
    report = fair_share_report(since=rnd.slot - timedelta(hours=1))
    assert report.tenants[0].owed == {"A100": -0.5, "H100": 1.23}
    standing = team_standing(tenant=world.alpha, since=rnd.slot - timedelta(hours=1))
    assert standing.compliance_24h == 0.0 and standing.owed["H100"] == 1.23
    assert team_standing(tenant=world.beta, since=rnd.slot).compliance_24h is None

    from tests.frontend.conftest import login

    html = login(Client(), world.alice).get("/t/alpha/").content.decode()
    assert "owed 1.23 GPU-hours of H100" in html and "0.50 beyond target GPU-hours of A100" in html
    assert "in 0% of the last 24 hours" in html


@pytest.mark.django_db
def test_metrics_export_the_fair_share_gauges(world: World, settings) -> None:
    from tests.ops.test_metrics import samples, scrape

    settings.METRICS_TOKEN = "t0ken-for-scrape"
    rnd = store(world, [[Row("alpha", 8, 4, 4, 4), Row("beta", 0, 4, 4, 4)]], start=timezone.now())[0]
    FairShareUsage.objects.create(
        tenant=world.beta, gpu_type=world.h100, owed_gpu_hours=2.0, updated_at=rnd.slot, round=rnd
    )
    s = samples(scrape(HTTP_AUTHORIZATION="Bearer t0ken-for-scrape"))
    assert s["gpumarket_tenant_fair_share_compliance_24h_ratio", (("tenant", "beta"),)] == 0
    assert s["gpumarket_tenant_fair_share_compliance_24h_ratio", (("tenant", "alpha"),)] == 1
    assert s["gpumarket_tenant_fair_share_shortfall_ratio", (("tenant", "beta"),)] == 0.5
    assert s["gpumarket_tenant_fair_share_owed_gpu_hours", (("gpu_type", "H100"), ("tenant", "beta"))] == 2


def test_the_diagnostics_come_from_the_same_module_over_real_rounds(world: World) -> None:
    """fairness_diagnostics (Jain's index, guarantee compliance, preemptions), the console's diagnostics beside
    the fair-share figures, over two real rounds: alpha's guarantee of 4 is met in both; beta, without one,
    complies trivially (min(demand, 0) = 0); Jain's index is defined once someone holds excess."""
    from market.selectors.fair_share import fairness_diagnostics
    from market.services import rounds
    from market.services.guarantees import guarantee_set

    w = world
    w.nodes(w.h100, 1, size=8)
    for tenant in (w.alpha, w.beta):
        w.fund(tenant, 1000)
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=4)
    make_job(w.alpha, w.amy, gpus=4, limits={w.h100: 3}, name="alpha-g")
    for i in range(3):
        make_job(w.beta, w.bea, gpus=4, limits={w.h100: 5}, name=f"beta-{i}")
    first = rounds.round_tick()
    assert first is not None and first.winners == 2, first and first.error
    d = fairness_diagnostics()
    assert d.rounds == 1 and d.contested_jain is not None
    by = {t.tenant: t for t in d.tenants}
    assert (by["alpha"].guarantee_compliance, by["alpha"].rounds_with_demand, by["alpha"].preemptions) == (
        1.0,
        1,
        0,
    )
    assert (by["beta"].guarantee_compliance, by["beta"].weight) == (1.0, float(w.beta.weight))
    assert fairness_diagnostics(until=first.slot).rounds == 0
