"""Fair share, one definition (ARCHITECTURE.md §Clearing; docs/allocator.md §Fair share): what each tenant is
owed per GPU type, how well it received it, and the history the clearing keeps of it.

Every figure of fair share calls this module: the simulator's summary, the admin console's fairness page, what-if
comparisons, ``/metrics`` and the rounds (which keep the history, ``Tenants.owed``). Pure numpy, no Django.

Per round tick and GPU type:

- held_i: GPUs tenant i holds in the type; waiting_i: GPUs of its waiting jobs that are eligible there (their bid
  accepts the type at or above its reserve, and the tenant can afford the hold), counted in the job's best
  eligible type only; demand d_i = held_i + waiting_i.
- target e_i by water-filling: first min(d_i, guarantee_i); then the rest of the type's GPUs by weight among
  tenants with unmet demand, each capped at its demand.
- a tick is *contended* in a type when some tenant waits there.

Arrays put ticks first and the GPU type last: ``held[tick, tenant, type]``; a single tick drops the first axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator.book import Book, hold_of
from allocator.result import Result

F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]

COMPLY = 0.95  # a tenant complies when it held at least this share of its target
HOUR = 3600.0


def targets(held: Any, waiting: Any, guarantee: Any, weight: Any, capacity: Any) -> F64:
    """Fair-share target e by water-filling, per (tick, tenant, type) (or per (tenant, type) for one tick).

    ``held``, ``waiting``: GPUs by [tick,] tenant, type; ``guarantee``: [tenant, type]; ``weight``: [tenant];
    ``capacity``: GPUs per type. First each tenant gets min(demand, guarantee); the rest of the type's GPUs go
    by weight to tenants with unmet demand, each capped at its demand, until nothing is left or all demand is
    met."""
    d = np.asarray(held, dtype=np.float64) + np.asarray(waiting, dtype=np.float64)
    single = d.ndim == 2
    if single:
        d = d[None]
    q = np.asarray(guarantee, dtype=np.float64)[None]
    w = np.asarray(weight, dtype=np.float64)[None, :, None]
    base = np.minimum(d, q)
    want = d - base  # unmet demand beyond the guarantee part
    rest = np.maximum(
        np.asarray(capacity, dtype=np.float64)[None, None, :] - base.sum(axis=1, keepdims=True), 0
    )
    e = base + _water_fill(want, w, rest)
    return e[0] if single else e


def _water_fill(want: F64, weight: F64, supply: F64) -> F64:
    """min(want, w * level) with the level where the sum is min(supply, sum want), for every (tick, type) at once
    (``want`` [tick, tenant, type], ``weight`` broadcast to it, ``supply`` [tick, 1, type]). Exact: the level is
    found among the breakpoints want/w, so a tenant capped at its demand gets exactly its demand."""
    total = want.sum(axis=1, keepdims=True)
    enough = total <= supply
    ratio = np.where(want > 0, want / weight, 0.0)
    order = np.argsort(ratio, axis=1, kind="stable")
    r = np.take_along_axis(ratio, order, axis=1)
    d = np.take_along_axis(want, order, axis=1)
    w = np.take_along_axis(np.broadcast_to(weight, want.shape), order, axis=1)
    below = np.cumsum(d, axis=1) - d  # demand of the tenants capped before this one
    w_rest = np.flip(np.cumsum(np.flip(w, axis=1), axis=1), axis=1)
    filled = below + r * w_rest  # what the level r_k hands out
    # the first breakpoint that hands out at least the supply sets the level
    k = np.minimum((filled < supply).sum(axis=1, keepdims=True), want.shape[1] - 1)
    level = (supply - np.take_along_axis(below, k, axis=1)) / np.take_along_axis(w_rest, k, axis=1)
    out = np.minimum(want, weight * np.maximum(level, 0.0))
    return np.asarray(np.where(enough, want, out), dtype=np.float64)


@dataclass(frozen=True)
class Demand:
    """One tick's demand by (tenant, type): GPUs held, GPUs waiting (best eligible type) and the smallest
    waiting gang (``inf`` where none waits)."""

    held: F64
    waiting: F64
    smallest: F64


def book_demand(book: Book, result: Result | None = None) -> Demand:
    """The demand of one round's book, per the definition: every GPU a tenant holds (any tier) and the GPUs of
    its pending bids that accept a type at or above its reserve and whose hold at that limit the tenant can
    afford (balance, guardrail), counted in the bid's best such type (the allocator's preference order).

    With the round's ``result``: the demand the round leaves behind, as the next tick sees it (winners held,
    not waiting; preempted leases no longer held)."""
    # imported here: allocator.reference's round imports this module (credit), and the package runs it on import
    from allocator.reference.order import preferences

    n_tenants, n_types = len(book.tenants), len(book.types)
    held = book.tenants.held.sum(axis=1).astype(np.float64)
    waiting = np.zeros((n_tenants, n_types))
    smallest = np.full((n_tenants, n_types), np.inf)
    bids = book.bids
    pending = np.ones(len(bids), dtype=np.bool_)
    if result is not None:
        w, ls, gone = result.winners, book.leases, result.preemptions.row
        np.add.at(held, (w.tenant, w.gpu_type), bids.gpus[w.bid].astype(np.float64))
        np.subtract.at(held, (ls.tenant[gone], ls.gpu_type[gone]), ls.gpus[gone].astype(np.float64))
        pending[w.bid] = False
    if len(bids):
        best = preferences(bids, book.types)[:, 0].astype(np.int64)
        rows = np.flatnonzero((best >= 0) & pending)
        limit = bids.limit[rows, best[rows]]
        hold = np.asarray(hold_of(bids.gpus[rows], limit, bids.max_s[rows]), dtype=np.int64)
        affordable = hold <= book.tenants.budget[bids.tenant[rows]]
        rows = rows[affordable]
        t = best[rows]
        m, k = bids.tenant[rows], bids.gpus[rows].astype(np.float64)
        np.add.at(waiting, (m, t), k)
        np.minimum.at(smallest, (m, t), k)
    return Demand(held, waiting, smallest)


def book_targets(book: Book, demand: Demand | None = None) -> F64:
    """Targets by (tenant, type) for one round's book."""
    demand = demand or book_demand(book)
    capacity = np.bincount(book.nodes.gpu_type, weights=book.nodes.capacity, minlength=len(book.types))
    return targets(demand.held, demand.waiting, book.tenants.guarantee, book.tenants.weight, capacity)


# ---- the history the clearing keeps ------------------------------------------------------------------------


def decay(owed: Any, dt_s: float, half_life_s: int) -> F64:
    """``owed`` after ``dt_s`` seconds of exponential decay with the half-life (0: forgotten at once)."""
    owed = np.asarray(owed, dtype=np.float64)
    if half_life_s <= 0:
        return np.zeros_like(owed)
    return np.asarray(owed * 0.5 ** (max(dt_s, 0.0) / half_life_s), dtype=np.float64)


def accrue(owed: Any, target: Any, held: Any, dt_s: float) -> F64:
    """The fair-share history plus the GPU-hours of target not held over ``dt_s`` (negative where the tenant
    held more than its target)."""
    gap = np.asarray(target, dtype=np.float64) - np.asarray(held, dtype=np.float64)
    return np.asarray(np.asarray(owed, dtype=np.float64) + gap * max(dt_s, 0.0) / HOUR, dtype=np.float64)


def owed_after(book: Book, result: Result, dt_s: float, interval_s: float) -> F64:
    """The history a round leaves for the next one: the book's ``owed``, decayed over ``dt_s`` (the time since
    the round that wrote it), plus what the tenants will be short of (or above) their targets in the state this
    round leaves, counted over one round ``interval_s``. The state after the round, not the book's: a job that
    arrived just before the freeze and won at once was never short of anything."""
    half_life = book.policy.fair_share_half_life_s
    if half_life <= 0:
        return np.zeros_like(book.tenants.owed)
    demand = book_demand(book, result)
    capacity = np.bincount(book.nodes.gpu_type, weights=book.nodes.capacity, minlength=len(book.types))
    target = targets(demand.held, demand.waiting, book.tenants.guarantee, book.tenants.weight, capacity)
    return accrue(decay(book.tenants.owed, dt_s, half_life), target, demand.held, interval_s)


def credit(book: Book, t: int) -> F64:
    """By tenant, GPUs of entitlement added in type ``t`` for what the history says it is owed (negative: taken
    for what it received beyond its target): owed GPU-hours over the payback time, at most one node's GPUs either
    way. 0 without history."""
    policy = book.policy
    if policy.fair_share_half_life_s <= 0:
        return np.zeros(len(book.tenants))
    # Bounded by one node of the type: enough to round a tenant's gang up to a whole node's worth (the starved
    # tenants of the replays are those of large gangs), never enough to hand one tenant the excess of many
    # rounds at once. Unbounded, a tenant whose gangs cannot be placed builds a debt of hundreds of GPU-hours,
    # takes every other tenant's entitlement, and its gangs still do not fit: the replays got worse
    # (docs/simulator.md, fair-share history).
    cap = float(book.nodes.capacity[book.nodes.gpu_type == t].max(initial=1))
    owed = book.tenants.owed[:, t] * HOUR / policy.fair_share_payback_s
    return np.asarray(np.clip(owed, -cap, cap), dtype=np.float64)


# ---- figures over a history of ticks -----------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """Per tick, tenant and type: what was held, what waited, the smallest waiting gang and the target; the
    ticks' times and the types' sizes. Every figure below reads one Series."""

    ticks: NDArray[np.int64]
    held: F64
    waiting: F64
    smallest: F64
    target: F64
    capacity: F64

    @classmethod
    def of(
        cls, ticks: Any, held: Any, waiting: Any, smallest: Any, guarantee: Any, weight: Any, capacity: Any
    ) -> Series:
        held = np.asarray(held, dtype=np.float64)
        waiting = np.asarray(waiting, dtype=np.float64)
        return cls(
            np.asarray(ticks, dtype=np.int64),
            held,
            waiting,
            np.asarray(smallest, dtype=np.float64),
            targets(held, waiting, guarantee, weight, capacity),
            np.asarray(capacity, dtype=np.float64),
        )

    @property
    def contended(self) -> BOOL:
        """[tick, type]: some tenant waits in the type."""
        return np.asarray((self.waiting > 0).any(axis=1), dtype=np.bool_)


def window_pairs(s: Series, window_s: int) -> tuple[BOOL, BOOL]:
    """Windows aligned on the first tick, each [start, start + window_s). Returns ``(counted, complied)`` by
    [window, tenant, type]: counted where the tenant had waiting demand in the type in that window; complied
    where, over the window's contended ticks, the GPU-time it held is at least 95% of its targets' sum."""
    if s.ticks.size == 0:
        empty = np.zeros((0,) + s.held.shape[1:], dtype=np.bool_)
        return empty, empty
    window = (s.ticks - s.ticks[0]) // window_s
    n = int(window[-1]) + 1
    shape = (n,) + s.held.shape[1:]
    c = s.contended[:, None, :]
    held, target = np.zeros(shape), np.zeros(shape)
    waited = np.zeros(shape, dtype=np.bool_)
    np.add.at(held, window, np.where(c, s.held, 0.0))
    np.add.at(target, window, np.where(c, s.target, 0.0))
    np.logical_or.at(waited, window, s.waiting > 0)
    complied = held >= COMPLY * target - 1e-9
    return waited, np.asarray(waited & complied, dtype=np.bool_)


def window_compliance(s: Series, window_s: int) -> float | None:
    """Fair-share compliance over windows: the share of (tenant, window, type) with waiting demand that held at
    least 95% of their target over the window's contended ticks. None when nobody ever waited."""
    counted, complied = window_pairs(s, window_s)
    return _share(complied.sum(), counted.sum())


def window_compliance_by_tenant(s: Series, window_s: int) -> list[float | None]:
    counted, complied = window_pairs(s, window_s)
    return [_share(complied[:, i].sum(), counted[:, i].sum()) for i in range(s.held.shape[1])]


def round_pairs(s: Series) -> tuple[BOOL, BOOL]:
    """Round compliance, gang-aware, by [tick, tenant, type]: ``counted`` where the tenant waits in the type;
    ``complied`` where it holds at least 95% of its target, or its shortfall is smaller than its smallest waiting
    gang (no gang of its could have used it)."""
    counted = s.waiting > 0
    short = s.target - s.held
    ok = (s.held >= COMPLY * s.target - 1e-9) | (short < s.smallest)
    return counted, np.asarray(counted & ok, dtype=np.bool_)


def round_compliance(s: Series) -> float | None:
    counted, complied = round_pairs(s)
    return _share(complied.sum(), counted.sum())


def round_compliance_by_tenant(s: Series) -> list[float | None]:
    counted, complied = round_pairs(s)
    return [_share(complied[:, i].sum(), counted[:, i].sum()) for i in range(s.held.shape[1])]


def shortfall(s: Series) -> float | None:
    """Sum over tenants of max(0, target - held) over the type's GPUs, averaged over contended (tick, type)
    pairs (Armada's fairness error). None when nothing was ever contended."""
    c = s.contended
    if not c.any():
        return None
    per = np.maximum(s.target - s.held, 0).sum(axis=1) / np.maximum(s.capacity[None, :], 1)
    return round(float(per[c].mean()), 4)


def shortfall_by_tenant(s: Series) -> list[float | None]:
    """Per tenant, max(0, target - held) over the type's GPUs, averaged over contended (tick, type) pairs."""
    c = s.contended
    if not c.any():
        return [None] * s.held.shape[1]
    per = np.maximum(s.target - s.held, 0) / np.maximum(s.capacity[None, None, :], 1)
    return [round(float(per[:, i, :][c].mean()), 4) for i in range(s.held.shape[1])]


def jain_excess(held: Any, guarantee: Any, weight: Any, waiting: Any) -> float | None:
    """Diagnostic only (not the fair-share yardstick: it ignores demand caps and gangs): mean Jain index of
    excess/weight over tenants with waiting jobs, in rounds where two or more of them contend and some excess
    was handed out. ``held``: [round, tenant, type]; ``guarantee``: [tenant, type]; ``weight``: [tenant];
    ``waiting``: [round, tenant] waiting jobs."""
    held = np.asarray(held, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    excess = np.maximum(held - np.asarray(guarantee)[None, :, :], 0).sum(axis=2) / weight[None, :]
    contending = np.asarray(waiting) > 0
    x = np.where(contending, excess, 0.0)
    n = contending.sum(axis=1)
    total = x.sum(axis=1)
    rounds = (n >= 2) & (total > 0)
    if not rounds.any():
        return None
    jain = total[rounds] ** 2 / (n[rounds] * (x[rounds] ** 2).sum(axis=1))
    return round(float(jain.mean()), 4)


def _share(num: Any, den: Any) -> float | None:
    return round(float(num) / float(den), 4) if den else None
