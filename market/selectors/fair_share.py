"""Fair-share figures over stored rounds, for the console, the team dashboard, the canary's guardrail and
/metrics (docs/portal.md §Fairness): the one selector module for fairness. Every fair-share figure is
allocator/fairshare.py's, against each tenant's *target* (ARCHITECTURE.md "Fair share, measured"), computed over
the per-round figures the commit keeps (``FairShareRound``: held, waiting, smallest gang, target per tenant and
type), not over the rounds' books: a day of rounds is a few thousand small rows, where a day of books would be
hundreds of decompressions, and the rows outlive the books' retention. The history (GPU-hours owed) is
``FairShareUsage``.

``fairness_diagnostics`` adds the console's diagnostics, labelled so there: Jain's index (the simulator's
implementation, allocator.fairshare.jain_excess) and guarantee compliance, from the newest rounds' books (they
need each tenant's guarantee and demand, which the per-round rows do not keep), and preemptions per tenant."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db.models import Count, Sum

from accounts.models import Tenant
from allocator import fairshare
from market.models import (
    BidOutcome,
    EndReason,
    FairShareRound,
    FairShareUsage,
    Lease,
    Round,
    RoundLoss,
    RoundState,
)
from market.selectors.book import Snapshot

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
    # The round commit's counts by tenant and reason (RoundLoss): a loss like the round before writes no
    # outcome row, so the rows would undercount the reasons that repeat.
    losses = RoundLoss.objects.filter(tenant__slug=worst.tenant)
    if since is not None:
        losses = losses.filter(round__slot__gte=since)
    if until is not None:
        losses = losses.filter(round__slot__lt=until)
    reasons: Counter[str] = Counter()
    for reason, n in losses.values_list("reason").annotate(n=Sum("bids")).order_by():
        reasons[reason] = int(n)
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


MAX_ROUNDS = (
    200  # the diagnostics read the newest rounds of the window; each costs a decompression of its book
)


@dataclass(frozen=True)
class TenantDiagnostics:
    tenant: str
    weight: float
    guarantee_compliance: (
        float | None
    )  # share of rounds with demand in which it held min(demand, q) of every type
    rounds_with_demand: int
    preemptions: int


@dataclass(frozen=True)
class FairnessDiagnostics:
    rounds: int  # round books read (the newest MAX_ROUNDS of the window)
    contested_jain: float | None
    tenants: list[TenantDiagnostics]


def fairness_diagnostics(
    *, since: datetime | None = None, until: datetime | None = None
) -> FairnessDiagnostics:
    """Jain's index of weight-normalised excess shares over contested rounds and, per tenant, guarantee
    compliance (a tenant with demand for a type held at least min(demand, q) of it after the round) and its
    leases preempted in the window. Diagnostics beside the fair-share figures, not the yardstick: neither looks at
    the target."""
    rounds = Round.objects.filter(state__in=[RoundState.COMMITTED, RoundState.DISPATCHED], book__isnull=False)
    if since is not None:
        rounds = rounds.filter(slot__gte=since)
    if until is not None:
        rounds = rounds.filter(slot__lt=until)
    chosen = list(rounds.order_by("-slot").values_list("pk", "book")[:MAX_ROUNDS])[::-1]
    won: dict[tuple[int, str, str], int] = defaultdict(int)
    for round_id, slug, type_name, gpus in BidOutcome.objects.filter(
        round_id__in=[c[0] for c in chosen], won=True
    ).values_list("round_id", "job__tenant__slug", "gpu_type__name", "job__gpus"):
        won[(round_id, slug, type_name)] += gpus

    tenant_names: list[str] = []
    weights: dict[str, float] = {}
    demand_rounds: dict[str, int] = defaultdict(int)
    compliant_rounds: dict[str, int] = defaultdict(int)
    rows: list[tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]] = []  # names, after, q, waiting
    for round_id, blob in chosen:
        book = Snapshot.load(blob).book
        t, ty, b = book.tenants, book.types, book.bids
        after = t.held.sum(axis=1).astype(
            np.int64
        )  # [tenant, type], held before the round, plus what it won:
        for i, slug in enumerate(t.names):
            for k, name in enumerate(ty.names):
                after[i, k] += won.get((round_id, slug, name), 0)
        demand = np.zeros((len(t.names), len(ty.names)), dtype=np.int64)
        for k in range(len(ty.names)):
            eligible = b.limit[:, k] >= ty.reserve[k]
            np.add.at(demand[:, k], b.tenant[eligible], b.gpus[eligible])
        q = t.guarantee.astype(np.int64)
        for i, slug in enumerate(t.names):
            if slug not in weights:
                tenant_names.append(slug)
            weights[slug] = float(t.weight[i])
            has = demand[i] > 0
            if has.any():
                demand_rounds[slug] += 1
                compliant_rounds[slug] += bool((after[i][has] >= np.minimum(demand[i][has], q[i][has])).all())
        rows.append((t.names, after, q, (demand > 0).sum(axis=1)))

    preempted = _preemptions(since, until)
    return FairnessDiagnostics(
        rounds=len(chosen),
        contested_jain=_jain(tenant_names, weights, rows),
        tenants=[
            TenantDiagnostics(
                tenant=slug,
                weight=weights[slug],
                guarantee_compliance=(compliant_rounds[slug] / demand_rounds[slug])
                if demand_rounds[slug]
                else None,
                rounds_with_demand=demand_rounds[slug],
                preemptions=preempted.get(slug, 0),
            )
            for slug in sorted(tenant_names)
        ],
    )


def _jain(
    tenants: list[str],
    weights: dict[str, float],
    rows: list[tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]],
) -> float | None:
    """Lay every round on one tenant axis (types may differ by round only in count, so sum over types) and
    call the simulator's implementation."""
    if not rows:
        return None
    ix = {slug: i for i, slug in enumerate(tenants)}
    n = len(tenants)
    held = np.zeros((len(rows), n, 1))
    guarantee = np.zeros((n, 1), dtype=np.int64)
    waiting = np.zeros((len(rows), n))
    for r, (names, after, q, wait) in enumerate(rows):
        for i, slug in enumerate(names):
            # Excess per type first, so one type's unused guarantee does not hide another type's excess.
            held[r, ix[slug], 0] = float(np.maximum(after[i] - q[i], 0).sum())
            waiting[r, ix[slug]] = float(wait[i])
    weight = np.array([weights[slug] for slug in tenants])
    return fairshare.jain_excess(held, guarantee, weight, waiting)


def _preemptions(since: datetime | None, until: datetime | None) -> dict[str, int]:
    qs = Lease.objects.filter(end_reason=EndReason.PREEMPTED)
    if since is not None:
        qs = qs.filter(stop_requested_at__gte=since)
    if until is not None:
        qs = qs.filter(stop_requested_at__lt=until)
    return dict(qs.values_list("tenant__slug").annotate(n=Count("pk")).order_by())
