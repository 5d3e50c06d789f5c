"""The count-level rules of a round: eligibility, budget, tiers G, B and S (ARCHITECTURE.md §Clearing 1-4).

Each function works on bid rows already in a fixed order and returns masks; placement comes later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_G, TIER_S, Bids, GpuTypes
from allocator.kernels import (
    budget_prefix,
    column_span,
    first_fit,
    first_fit_pool,
    in_tie_order,
    pack_keys,
    poor_bids,
    poor_tenants,
    radix_sort,
    tier_b_fill,
    type_preferences,
    unpack_keys,
)

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]


def preference_order(bids: Bids, types: GpuTypes) -> I32:
    """Eligibility and type preference, ARCHITECTURE.md §Clearing step 1 (several GPU types).

    A bid is eligible for a type when its limit there is at least the reserve r. Column j of the result is the
    type to try in pass j: eligible types by decreasing margin (limit - posted p), ties by type index; -1 pads
    (``kernels.type_preferences``).
    """
    out = np.empty(bids.limit.shape, dtype=np.int32)
    type_preferences(np.ascontiguousarray(bids.limit), types.posted, types.reserve, out)
    return out


@dataclass(frozen=True)
class Ranks:
    """The deterministic tie-break after price: every bid's rank by (submit time, job id). ``rank`` is None when
    the bid rows are already in that order (the rank of a row is the row itself); ``by_rank`` is then None too,
    else the row of each rank."""

    rank: I64 | None
    by_rank: I64 | None
    n: int

    def of(self, rows: I64) -> I64:
        return rows if self.rank is None else self.rank[rows]

    def rows_of(self, ranks: I64) -> I64:
        return ranks if self.by_rank is None else self.by_rank[ranks]


def tie_rank(bids: Bids) -> Ranks:
    """Rank of every bid by (submit time, job id): the deterministic tie-break after price."""
    n = len(bids)
    sub, job = bids.submit, bids.job
    if in_tie_order(sub, job):
        return Ranks(None, None, n)
    by_rank = np.lexsort((job, sub)).astype(np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[by_rank] = np.arange(n, dtype=np.int64)
    return Ranks(rank, by_rank, n)


RADIX_MIN = 2048  # below this many keys numpy's sort is as fast (the radix sort's counters cost a fixed time)
_SORTER: list[bool] = []  # [whether numpy's sort is the faster here], once timed


def numpy_sorts_faster() -> bool:
    """Whether numpy's sort of int64 keys beats ``kernels.radix_sort`` on this machine: timed once per process
    on 2^14 keys shaped like market order's. Why time it: numpy's sort is vectorised where the CPU allows
    (x86-simd-sort, AVX-512 or AVX2), and then twice as fast as the radix sort (37 us against 78 at 10^4 keys
    on a Xeon with AVX-512), and elsewhere four times slower (244 against 68 on an EPYC); which one a CPU gets
    is numpy's choice. Either gives the same order, so the choice changes no result."""
    if not _SORTER:
        rng = np.random.default_rng(0)
        n = 1 << 14
        key = (rng.integers(0, 1 << 20, n) << 14) | rng.permutation(n)
        tmp, best = np.empty_like(key), [float("inf"), float("inf")]
        for _ in range(3):
            for i in range(2):
                work = key.copy()
                t0 = time.perf_counter()
                if i:
                    work.sort()
                else:
                    radix_sort(work, 0, 34, tmp)
                best[i] = min(best[i], time.perf_counter() - t0)
        _SORTER.append(best[1] < best[0])
    return _SORTER[0]


def sort_keys(key: I64, lo_bit: int, hi_bit: int) -> None:
    """Sort packed keys in place, where they are unique in bits ``lo_bit``..``hi_bit``-1: ``kernels.radix_sort``
    for many keys unless numpy's sort is the faster here (``numpy_sorts_faster``), numpy's sort for few."""
    if key.shape[0] >= RADIX_MIN and not numpy_sorts_faster():
        radix_sort(key, lo_bit, hi_bit, np.empty_like(key))
    else:
        key.sort()


def market_order(rows: I64, price: I64, ranks: Ranks) -> tuple[I64, I64]:
    """``rows`` sorted by price desc, then submit time, then job id (ARCHITECTURE.md §Clearing, ties), with their
    prices (``price`` is indexed by bid row). One sort of packed integer keys (price, rank) where they fit in 63
    bits: it sorts values rather than indices, several times faster than an argsort."""
    p = price[rows]
    if rows.size < 2:
        return rows, p
    top, low = int(p.max()), int(p.min())
    bits = max(1, (ranks.n - 1).bit_length())
    if (top - low).bit_length() + bits > 62:
        order = np.lexsort((ranks.of(rows), -p))
        return rows[order], p[order]
    key = np.subtract(top, p, dtype=np.int64)
    key <<= bits
    key |= ranks.of(rows)
    sort_keys(key, 0, (top - low).bit_length() + bits)
    rank = key & ((1 << bits) - 1)
    key >>= bits
    return ranks.rows_of(rank), np.subtract(top, key, dtype=np.int64)


def market_columns(rows: I64, price: I64, ranks: Ranks, gpus: I32, tenant: I32) -> tuple[I64, I64, I32, I32]:
    """``market_order`` of ``rows`` with their gang sizes and tenants in that order too. Where the bits allow,
    the two ride in the low bits of the sort keys (read in row order, which is cheap, instead of gathered in
    market order after the sort, which is not); else they are gathered."""
    if rows.size < 2:
        return rows, price[rows], gpus[rows], tenant[rows]
    low, top, g_max, m_max = column_span(rows, price, gpus, tenant)
    bits = max(1, (ranks.n - 1).bit_length())
    g_bits, m_bits = max(1, g_max.bit_length()), max(1, m_max.bit_length())
    width = (top - low).bit_length() + bits + g_bits + m_bits
    if width > 62 or g_max < 0 or m_max < 0:
        order, p = market_order(rows, price, ranks)
        return order, p, gpus[order], tenant[order]
    none = np.zeros(0, dtype=np.int64)
    rank = none if ranks.rank is None else ranks.rank
    key = np.empty(rows.shape[0], dtype=np.int64)  # (numpy allocates kernel outputs: kernels.py)
    pack_keys(rows, price, rank, gpus, tenant, top, (bits, m_bits, g_bits), key)
    sort_keys(key, g_bits + m_bits, width)  # (price, rank) is unique: the columns below need no sorting
    n = key.shape[0]
    out = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int32))
    unpack_keys(key, top, (bits, m_bits, g_bits), none if ranks.by_rank is None else ranks.by_rank, out)
    return out


def market_positions(rows: I64, p: I64, ranks: Ranks) -> I64:
    """Positions of ``rows`` (ascending, with their prices ``p``) in market order: price desc, then submit time,
    then job id. Where ranks are rows, ascending positions are already in rank order, so one sort of packed
    (price, position) keys gives the order; else a packed (price, rank) argsort; else a lexsort."""
    n = rows.shape[0]
    if n < 2:
        return np.arange(n, dtype=np.int64)
    top, low = int(p.max()), int(p.min())
    span = (top - low).bit_length()
    bits = max(1, (n - 1).bit_length() if ranks.rank is None else (ranks.n - 1).bit_length())
    if span + bits > 62:
        return np.lexsort((ranks.of(rows), -p)).astype(np.int64)
    key = np.subtract(top, p, dtype=np.int64)
    key <<= bits
    if ranks.rank is None:
        key |= np.arange(n, dtype=np.int64)
        sort_keys(key, 0, span + bits)
        return key & ((1 << bits) - 1)
    key |= ranks.rank[rows]
    return np.argsort(key).astype(np.int64)  # keys are distinct (ranks are), so any sort is stable


def budget_filter(
    rows: I64,
    price: I64,
    ranks: Ranks,
    bids: Bids,
    budget_left: I64,
    choice: I32,
    noted: tuple[BOOL, I32, I64],
) -> I64:
    """Budget filter, ARCHITECTURE.md §Clearing step 1: in the tenant's own order (price desc, submit time, job
    id), admit bids while their holds at the limit price (the most they can pay) fit the tenant's budget.
    Only the bids of the tenants who might not pay for all of theirs (``kernels.poor_tenants``) are walked; the
    others pass whole. ``noted``: the (over budget, type tried, figure) arrays where a first refusal is noted.
    Returns the refused bid rows."""
    poor, n = poor_tenants(rows, bids.tenant, bids.gpus, price, bids.max_s, budget_left)
    if n == 0:
        return rows[:0]
    compact = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int64))
    poor_bids(rows, poor, bids.tenant, bids.gpus, price, bids.max_s, compact)
    row, p, tenant, need = compact
    order = market_positions(row, p, ranks)  # market order keeps each tenant's bids in its own order
    refused = np.empty(n, dtype=np.int64)
    return refused[: budget_prefix(order, row, tenant, need, budget_left, choice, *noted, refused)]


def tier_g(tier: I8, tenant: I32, gpus: I32, left: I64) -> int:
    """Tier G, ARCHITECTURE.md §Clearing step 2: each tenant's eligible bids (``tier``/``tenant``/``gpus`` by
    position in market order, so each tenant's in its own order) are first-fit into its unused guarantee (q
    minus every GPU it holds), ``left``, spent in place. Returns the GPUs taken."""
    if not left.any():
        return 0
    return int(first_fit(tier, TIER_G, tier.shape[0], tenant, gpus, left))


def tier_b(
    tier: I8, at_p: int, tenant: I32, gpus: I32, weight: NDArray[np.float64], supply: int
) -> tuple[int, I64]:
    """Tier B, ARCHITECTURE.md §Clearing step 3: weighted water-filling of the excess ``supply`` over each
    tenant's demand (its open bids at or above p: the positions below ``at_p``, in market order), then each
    tenant first-fits its bids, in its own order, into floor(e_t) (a tenant whose share covers its demand takes
    them all); ``kernels.tier_b_fill``. Returns the GPUs taken and the e_t."""
    share = np.empty(weight.shape[0], dtype=np.int64)
    return int(tier_b_fill(tier, at_p, tenant, gpus, weight, supply, share)), share


def tier_s(tier: I8, gpus: I32, supply: int) -> int:
    """Tier S, ARCHITECTURE.md §Clearing step 4: what is left goes to the highest remaining bids per GPU (open
    positions in market order), first-fit by count. Returns the GPUs left over."""
    return int(first_fit_pool(tier, TIER_S, gpus, max(supply, 0)))


def spot_price(reserve: int, posted: int, first_losing: int, lowest_winning: int) -> int:
    """Tier S uniform price, ARCHITECTURE.md §Clearing step 4: max(r, min(first losing bid, lowest winning
    bid, p)). ``first_losing`` is -1 when nobody lost."""
    candidates = [lowest_winning, posted] + ([first_losing] if first_losing >= 0 else [])
    return max(reserve, min(candidates))


def next_posted(posted: I64, reserve: I64, cap: I64, demand: I64, supply: I64, step_bp: int) -> I64:
    """Posted price update, ARCHITECTURE.md §Clearing step 7: a multiplicative step up when demand at p exceeds
    supply, down when it falls short, clamped to [r, max]; integer arithmetic, moving by at least one unit.

    Known flaw (docs/allocator.md, step 7): when every bid is at r, p flips between r and one step above."""
    out = np.empty(posted.shape[0], dtype=np.int64)  # a few types: Python ints beat numpy's per-call cost
    for t, (p, r, top, d, s) in enumerate(
        zip(posted.tolist(), reserve.tolist(), cap.tolist(), demand.tolist(), supply.tolist(), strict=True)
    ):
        if step_bp and d > s:
            p += max(1, p * step_bp // 10_000)
        elif step_bp and d < s:
            p -= max(1, p * step_bp // (10_000 + step_bp))
        out[t] = min(max(p, r), top)
    return out
