"""The mutable working state of one round, built from (and never written back to) the frozen Book."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator.book import Book
from allocator.placement import Floor
from allocator.tiers import Ranks, tie_rank

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]


@dataclass
class RoundState:
    """Working arrays: per bid (tier won, type, last loss reason and figure), per tenant (GPUs held per tier and
    type, budget left), per lease (tier after re-tiering, preempted), plus the placement floor."""

    book: Book
    floor: Floor
    ranks: Ranks
    held: I64
    won: I64
    budget_left: I64
    lease_tier: I8
    preempted: BOOL
    preempted_for: I64
    won_bid: BOOL
    starving: BOOL  # per bid: waited at least starve_rounds
    any_starving: bool
    reason: I8
    reason_type: I32
    figure: I64
    over_budget: BOOL
    share: I64
    s_low: I64
    s_lose: I64
    reclaim_failed: I64  # by (tenant, type): the smallest gang reclaim could not place this round (max: none)
    counters: dict[str, int] = field(default_factory=dict)
    reserved_jobs: list[tuple[int, int]] = field(default_factory=list)
    retiered: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def start(cls, book: Book) -> RoundState:
        n_bids, n_types, n_leases = len(book.bids), len(book.types), len(book.leases)
        starving = book.bids.waited >= book.policy.starve_rounds
        return cls(
            book=book,
            floor=Floor.of(book.nodes, n_types, n_bids),
            ranks=tie_rank(book.bids),
            held=book.tenants.held.astype(np.int64),
            won=np.zeros((len(book.tenants), n_types), dtype=np.int64),
            budget_left=book.tenants.budget,  # a fresh array (Tenants.budget)
            lease_tier=book.leases.tier.copy(),
            preempted=np.zeros(n_leases, dtype=np.bool_),
            preempted_for=np.full(n_leases, -1, dtype=np.int64),
            won_bid=np.zeros(n_bids, dtype=np.bool_),
            starving=starving,
            any_starving=bool(starving.any()),
            reason=np.zeros(n_bids, dtype=np.int8),
            reason_type=np.full(n_bids, -1, dtype=np.int32),
            figure=np.zeros(n_bids, dtype=np.int64),
            over_budget=np.zeros(n_bids, dtype=np.bool_),
            share=np.zeros((len(book.tenants), n_types), dtype=np.int64),
            s_low=np.full(n_types, -1, dtype=np.int64),
            s_lose=np.full(n_types, -1, dtype=np.int64),
            reclaim_failed=np.full((len(book.tenants), n_types), np.iinfo(np.int64).max, dtype=np.int64),
            counters={
                "guarantee_unrestored": 0,
                "reclaimed_gangs": 0,
                "starving_placed": 0,
                "starving_reserved": 0,
            },
        )

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by
