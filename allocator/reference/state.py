"""The working state of one round (built from, never written back to, the frozen Book) and of one type's bids
in a pass."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator.book import Book
from allocator.reference import consolidate as cs
from allocator.reference import placement as pl
from allocator.reference import reclaim as rc
from allocator.reference import reserve as rv
from allocator.reference.order import TieRank

I64 = NDArray[np.int64]
I8 = NDArray[np.int8]
I32 = NDArray[np.int32]
F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]


@dataclass
class RoundState:
    """The working state of one round, built from (never written back to) the frozen Book."""

    book: Book
    ranks: TieRank
    floor: pl.Floor
    pre: rc.Preempting
    schedulable: I64  # by type: GPUs free at the start plus GPUs held
    budget_left: I64
    won: I64  # by (tenant, type): GPUs won this round
    won_tier: I8  # by bid: -1 lost
    won_type: NDArray[np.int32]
    reason: I8
    reason_type: NDArray[np.int32]
    figure: I64
    over_budget: BOOL
    entitled: F64  # by (tenant, type): e_t of step 3
    s_low: I64
    s_lose: I64
    retiered: I64
    counters: dict[str, int] = field(default_factory=dict)
    frees_: dict[int, list[tuple[int, int]]] | None = None
    moved: cs.Moved = field(default_factory=cs.Moved)

    @classmethod
    def start(cls, book: Book) -> RoundState:
        n_bids, n_types, n_tenants, n_leases = (
            len(book.bids),
            len(book.types),
            len(book.tenants),
            len(book.leases),
        )
        held = book.tenants.held.astype(np.int64)
        lease_tier = book.leases.tier.copy()
        retiered = rc.retier(book, held, lease_tier)
        free_by_type = np.bincount(book.nodes.gpu_type, weights=book.nodes.free_count, minlength=n_types)
        return cls(
            book=book,
            ranks=TieRank(book.bids),
            floor=pl.Floor.of(book.nodes, n_types),
            pre=rc.Preempting(
                book,
                lease_tier,
                np.zeros(n_leases, dtype=np.bool_),
                np.full(n_leases, -1, dtype=np.int64),
                np.zeros(n_leases, dtype=np.int64),
                held,
                book.leases.gpus,
            ),
            schedulable=free_by_type.astype(np.int64) + held.sum(axis=(0, 1)),
            budget_left=book.tenants.budget,
            won=np.zeros((n_tenants, n_types), dtype=np.int64),
            won_tier=np.full(n_bids, -1, dtype=np.int8),
            won_type=np.full(n_bids, -1, dtype=np.int32),
            reason=np.zeros(n_bids, dtype=np.int8),
            reason_type=np.full(n_bids, -1, dtype=np.int32),
            figure=np.zeros(n_bids, dtype=np.int64),
            over_budget=np.zeros(n_bids, dtype=np.bool_),
            entitled=np.zeros((n_tenants, n_types), dtype=np.float64),
            s_low=np.full(n_types, -1, dtype=np.int64),
            s_lose=np.full(n_types, -1, dtype=np.int64),
            retiered=retiered,
            counters={
                "backfill_overran": 0,
                "backfilled_gangs": 0,
                "backfilled_gpus": 0,
                "consolidated_gangs": 0,
                "fair_reclaimed_gangs": 0,
                "guarantee_on_reserved": 0,
                "guarantee_unrestored": 0,
                "moved_leases": 0,
                "reclaimed_gangs": 0,
                "reserved_idle_gpus": 0,
                "starving_placed": 0,
                "starving_reserved": 0,
            },
        )

    @property
    def frees(self) -> dict[int, list[tuple[int, int]]]:
        """By node: (expected end, GPUs) of the leases running there at the start of the round, soonest first;
        built on first use (only a round that reserves needs it)."""
        if self.frees_ is None:
            self.frees_ = rv.frees_by_node(self.book, np.zeros(len(self.book.leases), dtype=np.bool_))
        return self.frees_

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def holding(self, t: int) -> I64:
        """GPUs of type ``t`` each tenant holds now: before the round, less preempted, plus won."""
        return np.asarray(self.pre.held[:, :, t].sum(axis=1) + self.won[:, t], dtype=np.int64)


@dataclass
class TypeBids:
    """One type's admitted bids of a pass, by position in market order, and what the steps decide for them."""

    rows: I64
    price: I64
    tenant: I32
    gpus: I32
    tier: I8  # selected by tier G, B or S (-1: by none)
    placed: BOOL


def placed_gpus(s: TypeBids, n_tenants: int) -> I64:
    return placed_gpus_of(s, s.placed, n_tenants)


def placed_gpus_of(s: TypeBids, mask: BOOL, n_tenants: int) -> I64:
    """GPUs by tenant of the positions in ``mask``."""
    return np.bincount(s.tenant[mask], weights=s.gpus[mask], minlength=n_tenants).astype(np.int64)
