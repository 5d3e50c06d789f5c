"""Fairness figures from stored round results (ARCHITECTURE.md §Clearing, steps 2-3), for the admin console.

Each round's frozen book (stored on the round) gives what every tenant held before the round, its guarantee,
weight and pending demand; its BidOutcome rows give what it won. From these, per round, tenant and GPU type:

- guaranteed: the guarantee q;
- allocated: GPUs held after the round (held before plus won);
- entitled: q plus its weighted share of the excess, the allocator's own entitlement function (allocator.reference.tiers.entitlement):
  the excess water-filled over each tenant's excess want (held above q plus pending demand at or above p);
- compliant: a tenant with demand for a type held at least min(demand, q) of it.

Jain's index is the simulator's one implementation (allocator.sim.metrics.jain_excess).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from allocator.fairshare import jain_excess
from allocator.reference.tiers import entitlement
from market.models import BidOutcome, EndReason, Lease, Round, RoundState
from market.selectors.book import Snapshot

MAX_ROUNDS = 200  # the newest rounds of the window; each costs a decompression of its book


@dataclass
class TenantTypeSeries:
    tenant: str
    gpu_type: str
    slots: list[datetime] = field(default_factory=list)
    guaranteed: list[int] = field(default_factory=list)
    entitled: list[int] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TenantFairness:
    tenant: str
    weight: float
    compliance: float | None  # share of rounds with demand in which it held min(demand, q) of every type
    rounds_with_demand: int
    preemptions: int


@dataclass(frozen=True)
class Fairness:
    rounds: int
    contested_jain: float | None
    tenants: list[TenantFairness]
    series: list[TenantTypeSeries]


def _entitled(
    held: np.ndarray, q: np.ndarray, want_p: np.ndarray, weight: np.ndarray, cap: int
) -> np.ndarray:
    """q + floor(e_t) for one type: the allocator's own entitlement over holdings (step 3)."""
    return q + np.floor(entitlement(held, q, want_p, weight.astype(np.float64), cap) + 1e-9).astype(np.int64)


def fairness(*, since: datetime | None = None, until: datetime | None = None) -> Fairness:
    rounds = Round.objects.filter(state__in=[RoundState.COMMITTED, RoundState.DISPATCHED], book__isnull=False)
    if since is not None:
        rounds = rounds.filter(slot__gte=since)
    if until is not None:
        rounds = rounds.filter(slot__lt=until)
    chosen = list(rounds.order_by("-slot").values_list("pk", "slot", "book")[:MAX_ROUNDS])[::-1]
    won: dict[tuple[int, str, str], int] = defaultdict(int)
    for round_id, slug, type_name, gpus in BidOutcome.objects.filter(
        round_id__in=[c[0] for c in chosen], won=True
    ).values_list("round_id", "job__tenant__slug", "gpu_type__name", "job__gpus"):
        won[(round_id, slug, type_name)] += gpus

    tenant_names: list[str] = []
    weights: dict[str, float] = {}
    series: dict[tuple[str, str], TenantTypeSeries] = {}
    demand_rounds: dict[str, int] = defaultdict(int)
    compliant_rounds: dict[str, int] = defaultdict(int)
    held_rows, guarantee_rows, waiting_rows, weight_rows = [], [], [], []
    for round_id, slot, blob in chosen:
        book = Snapshot.load(blob).book
        t, ty, b = book.tenants, book.types, book.bids
        n_t, n_ty = len(t.names), len(ty.names)
        held = t.held.sum(axis=1).astype(np.int64)  # [tenant, type]
        after = held.copy()
        for i, slug in enumerate(t.names):
            for k, name in enumerate(ty.names):
                after[i, k] += won.get((round_id, slug, name), 0)
        demand = np.zeros((n_t, n_ty), dtype=np.int64)
        demand_p = np.zeros((n_t, n_ty), dtype=np.int64)
        for k in range(n_ty):
            eligible = b.limit[:, k] >= ty.reserve[k]
            np.add.at(demand[:, k], b.tenant[eligible], b.gpus[eligible])
            at_p = b.limit[:, k] >= ty.posted[k]
            np.add.at(demand_p[:, k], b.tenant[at_p], b.gpus[at_p])
        capacity = np.zeros(n_ty, dtype=np.int64)
        np.add.at(capacity, book.nodes.gpu_type, book.nodes.capacity)
        q = t.guarantee.astype(np.int64)
        for i, slug in enumerate(t.names):
            if slug not in weights:
                tenant_names.append(slug)
            weights[slug] = float(t.weight[i])
            has = demand[i] > 0
            if has.any():
                demand_rounds[slug] += 1
                ok = after[i][has] >= np.minimum(demand[i][has], q[i][has])
                compliant_rounds[slug] += bool(ok.all())
        for k, name in enumerate(ty.names):
            ent = _entitled(held[:, k], q[:, k], demand_p[:, k], t.weight, int(capacity[k]))
            for i, slug in enumerate(t.names):
                if q[i, k] == 0 and after[i, k] == 0 and demand[i, k] == 0 and (slug, name) not in series:
                    continue
                s = series.setdefault((slug, name), TenantTypeSeries(slug, name))
                s.slots.append(slot)
                s.guaranteed.append(int(q[i, k]))
                s.entitled.append(int(ent[i]))
                s.allocated.append(int(after[i, k]))
        # The Jain index needs one tenant axis across rounds: the rounds' own tenants, laid on the union later.
        held_rows.append((t.names, after))
        guarantee_rows.append((t.names, q))
        waiting_rows.append((t.names, (demand > 0).sum(axis=1)))
        weight_rows.append(t.weight)

    jain = _jain(tenant_names, weights, held_rows, guarantee_rows, waiting_rows)
    preempted = _preemptions(since, until)
    return Fairness(
        rounds=len(chosen),
        contested_jain=jain,
        tenants=[
            TenantFairness(
                tenant=slug,
                weight=weights[slug],
                compliance=(compliant_rounds[slug] / demand_rounds[slug]) if demand_rounds[slug] else None,
                rounds_with_demand=demand_rounds[slug],
                preemptions=preempted.get(slug, 0),
            )
            for slug in sorted(tenant_names)
        ],
        series=sorted(series.values(), key=lambda s: (s.gpu_type, s.tenant)),
    )


def _jain(
    tenants: list[str],
    weights: dict[str, float],
    held_rows: list[tuple[tuple[str, ...], np.ndarray]],
    guarantee_rows: list[tuple[tuple[str, ...], np.ndarray]],
    waiting_rows: list[tuple[tuple[str, ...], np.ndarray]],
) -> float | None:
    """Lay every round on one tenant axis (types may differ by round only in count, so sum over types) and
    call the simulator's implementation."""
    if not held_rows:
        return None
    ix = {slug: i for i, slug in enumerate(tenants)}
    n = len(tenants)
    held = np.zeros((len(held_rows), n, 1))
    guarantee = np.zeros((n, 1), dtype=np.int64)
    waiting = np.zeros((len(held_rows), n))
    for r, ((names, after), (_, q), (_, wait)) in enumerate(
        zip(held_rows, guarantee_rows, waiting_rows, strict=True)
    ):
        for i, slug in enumerate(names):
            # Excess per type first, so one type's unused guarantee does not hide another type's excess.
            held[r, ix[slug], 0] = float(np.maximum(after[i] - q[i], 0).sum())
            waiting[r, ix[slug]] = float(wait[i])
    weight = np.array([weights[slug] for slug in tenants])
    return jain_excess(held, guarantee, weight, waiting)


def _preemptions(since: datetime | None, until: datetime | None) -> dict[str, int]:
    qs = Lease.objects.filter(end_reason=EndReason.PREEMPTED)
    if since is not None:
        qs = qs.filter(stop_requested_at__gte=since)
    if until is not None:
        qs = qs.filter(stop_requested_at__lt=until)
    from django.db.models import Count

    return dict(qs.values_list("tenant__slug").annotate(n=Count("pk")).order_by())
