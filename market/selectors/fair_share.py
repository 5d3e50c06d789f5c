"""Fair-share figures over stored rounds, for the console, the team dashboard and /metrics (docs/portal.md
§Fairness). Every figure is allocator/fairshare.py's, computed over the per-round figures the commit keeps
(``FairShareRound``: held, waiting, smallest gang, target per tenant and type), not over the rounds' books: a
day of rounds is a few thousand small rows, where a day of books would be hundreds of decompressions, and the
rows outlive the books' retention. The history (GPU-hours owed) is ``FairShareUsage``."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from accounts.models import Tenant
from allocator import fairshare
from market.models import BidOutcome, FairShareRound, FairShareUsage

DAY, HOUR = 86_400, 3_600


@dataclass
class TargetSeries:
    """Per round, what one tenant held of one type and its fair-share target (and what waited)."""

    tenant: str
    gpu_type: str
    slots: list[datetime] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    target: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TenantShare:
    tenant: str
    compliance_24h: float | None
    compliance_1h: float | None
    round_compliance: float | None
    shortfall: float | None
    owed: dict[str, float]  # GPU type -> GPU-hours owed now (negative: received beyond its target)


@dataclass(frozen=True)
class FairShareReport:
    rounds: int
    compliance_24h: float | None
    compliance_1h: float | None
    round_compliance: float | None
    shortfall: float | None
    tenants: list[TenantShare]
    series: list[TargetSeries]
    worst: str | None  # the tenant with the lowest standing in the window
    why: str  # one sentence on why (empty when no tenant waited)


@dataclass(frozen=True)
class _Window:
    tenants: list[str]
    types: list[str]
    slots: list[datetime]
    series: fairshare.Series


def _window(since: datetime | None, until: datetime | None) -> _Window:
    rows = FairShareRound.objects.all()
    if since is not None:
        rows = rows.filter(slot__gte=since)
    if until is not None:
        rows = rows.filter(slot__lt=until)
    data = list(
        rows.order_by("slot").values_list(
            "slot", "tenant__slug", "gpu_type__name", "held", "waiting", "smallest", "target", "capacity"
        )
    )
    slots = sorted({r[0] for r in data})
    tenants = sorted({r[1] for r in data})
    types = sorted({r[2] for r in data})
    si = {s: i for i, s in enumerate(slots)}
    ti = {t: i for i, t in enumerate(tenants)}
    ki = {k: i for i, k in enumerate(types)}
    shape = (len(slots), len(tenants), len(types))
    held, waiting, target = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    smallest = np.full(shape, np.inf)
    capacity = np.zeros(len(types))
    for slot, slug, name, h, w, small, e, cap in data:
        at = (si[slot], ti[slug], ki[name])
        held[at], waiting[at], target[at] = h, w, e
        if small is not None:
            smallest[at] = small
        capacity[ki[name]] = cap  # the newest round's size of the type (rows come in slot order)
    ticks = np.array([int(s.timestamp()) for s in slots], dtype=np.int64)
    return _Window(tenants, types, slots, fairshare.Series(ticks, held, waiting, smallest, target, capacity))


def owed_by_tenant() -> dict[str, dict[str, float]]:
    """GPU-hours each tenant is owed now, by GPU type (FairShareUsage), rounded for display."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for slug, name, hours in FairShareUsage.objects.values_list(
        "tenant__slug", "gpu_type__name", "owed_gpu_hours"
    ).order_by("tenant__slug", "gpu_type__name"):
        out[slug][name] = round(hours, 2)
    return out


def round_compliance_by_tenant(*, since: datetime, until: datetime) -> dict[str, float]:
    """Each tenant's fair-share round compliance over [since, until) (allocator.fairshare.round_pairs: the
    share of the rounds it waited in where it held at least 95% of its target, gang-aware); tenants that did
    not wait are absent. What a canary's compliance guardrail reads (docs/policy.md §Canary)."""
    win = _window(since, until)
    shares = fairshare.round_compliance_by_tenant(win.series)
    return {slug: share for slug, share in zip(win.tenants, shares, strict=True) if share is not None}


def fair_share_report(*, since: datetime | None = None, until: datetime | None = None) -> FairShareReport:
    win = _window(since, until)
    s = win.series
    c24 = fairshare.window_compliance_by_tenant(s, DAY)
    c1 = fairshare.window_compliance_by_tenant(s, HOUR)
    rc = fairshare.round_compliance_by_tenant(s)
    sf = fairshare.shortfall_by_tenant(s)
    owed = owed_by_tenant()
    tenants = [
        TenantShare(slug, c24[i], c1[i], rc[i], sf[i], owed.get(slug, {}))
        for i, slug in enumerate(win.tenants)
    ]
    series = []
    for i, slug in enumerate(win.tenants):
        for k, name in enumerate(win.types):
            if not (s.held[:, i, k].any() or s.target[:, i, k].any() or s.waiting[:, i, k].any()):
                continue
            ts = TargetSeries(slug, name, list(win.slots))
            ts.held = [int(v) for v in s.held[:, i, k]]
            ts.target = [round(float(v), 2) for v in s.target[:, i, k]]
            ts.waiting = [int(v) for v in s.waiting[:, i, k]]
            series.append(ts)
    worst, why = _worst(win, tenants, since, until)
    return FairShareReport(
        rounds=len(win.slots),
        compliance_24h=fairshare.window_compliance(s, DAY),
        compliance_1h=fairshare.window_compliance(s, HOUR),
        round_compliance=fairshare.round_compliance(s),
        shortfall=fairshare.shortfall(s),
        tenants=tenants,
        series=sorted(series, key=lambda t: (t.gpu_type, t.tenant)),
        worst=worst,
        why=why,
    )


def _standing(t: TenantShare) -> tuple[float, float, float]:
    """Lower is worse: 24 h compliance first, then round compliance, then shortfall."""
    c24 = 2.0 if t.compliance_24h is None else t.compliance_24h
    rc = 2.0 if t.round_compliance is None else t.round_compliance
    return (c24, rc, -(t.shortfall or 0.0))


def _worst(
    win: _Window, tenants: list[TenantShare], since: datetime | None, until: datetime | None
) -> tuple[str | None, str]:
    """The tenant with the lowest standing and one sentence on why, from its rounds and its bids' outcomes:
    gangs larger than what remains of its target, bids below the posted price, money run out, or within its target."""
    waited = [t for t in tenants if t.round_compliance is not None]
    if not waited:
        return None, ""
    worst = min(waited, key=_standing)
    i = win.tenants.index(worst.tenant)
    s = win.series
    short = (s.target[:, i, :] - s.held[:, i, :] >= 1) & (s.waiting[:, i, :] > 0)
    if not short.any():
        return worst.tenant, f"{worst.tenant} was within its fair-share target whenever it waited."
    outcomes = BidOutcome.objects.filter(won=False, job__tenant__slug=worst.tenant)
    if since is not None:
        outcomes = outcomes.filter(round__slot__gte=since)
    if until is not None:
        outcomes = outcomes.filter(round__slot__lt=until)
    reasons = Counter(outcomes.values_list("reason", flat=True))
    gangs_too_big = (s.smallest[:, i, :] > s.target[:, i, :] - s.held[:, i, :])[short].mean()
    if gangs_too_big >= 0.5:
        return worst.tenant, (
            f"{worst.tenant}'s waiting gangs are larger than what remains of its fair-share target, so no "
            "round could place one without taking GPUs beyond its share."
        )
    top = reasons.most_common(1)[0][0] if reasons else ""
    if top == "over_budget" or reasons.get("over_budget_at_commit"):
        return (
            worst.tenant,
            f"{worst.tenant} ran out of budget: its bids' holds did not fit its available money.",
        )
    if top == "busy":
        return worst.tenant, (
            f"{worst.tenant}'s bids found every GPU held or claimed by guaranteed and borrowed jobs: no spot "
            "GPU was left, and no higher bid took its place."
        )
    if top in ("outbid", "guarantee_full_below_posted", "below_reserve"):
        return worst.tenant, (
            f"{worst.tenant} bid below the posted price, so others' bids took the GPUs beyond its guarantee."
        )
    if top == "no_node_fits":
        return worst.tenant, f"{worst.tenant}'s gangs found no node with enough free GPUs to fit them."
    return worst.tenant, f"{worst.tenant} held less than its fair-share target while it waited."


@dataclass(frozen=True)
class TeamStanding:
    owed: dict[str, float]
    compliance_24h: float | None


def team_standing(*, tenant: Tenant, since: datetime) -> TeamStanding:
    """One tenant's own standing: what it is owed now (types where it is neither owed nor ahead left out) and
    its 24 h compliance since ``since``."""
    owed = {name: hours for name, hours in owed_by_tenant().get(tenant.slug, {}).items() if hours}
    win = _window(since, None)
    if tenant.slug not in win.tenants:
        return TeamStanding(owed, None)
    c24 = fairshare.window_compliance_by_tenant(win.series, DAY)
    return TeamStanding(owed, c24[win.tenants.index(tenant.slug)])
