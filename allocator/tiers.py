"""The count-level rules of a round: eligibility, budget, tiers G, B and S (ARCHITECTURE.md §Clearing 1-4).

Each function works on bid rows already in a fixed order and returns masks; placement comes later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from allocator.book import Bids, GpuTypes, hold_of

if TYPE_CHECKING:
    from allocator.clearing import Slate
from allocator.segments import first_fit, prefix_fit, water_fill

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
BOOL = NDArray[np.bool_]


def preference_order(bids: Bids, types: GpuTypes) -> I32:
    """Eligibility and type preference, ARCHITECTURE.md §Clearing step 1 (several GPU types).

    A bid is eligible for a type when its limit there is at least the reserve r. Column j of the result is the
    type to try in pass j: eligible types by decreasing margin (limit - posted p), ties by type index; -1 pads.
    """
    eligible = bids.limit >= types.reserve[None, :]
    if bids.limit.shape[1] == 1:
        return np.where(eligible, 0, -1).astype(np.int32)
    n, n_types = bids.limit.shape
    limit_t = np.ascontiguousarray(bids.limit.T)
    ok_t = limit_t >= types.reserve[:, None]
    key = np.where(ok_t, types.posted[:, None] - limit_t, np.iinfo(np.int64).max)  # one row per type
    flat = np.full(n * n_types, -1, dtype=np.int32)
    base = np.arange(n, dtype=np.int64) * n_types
    for j in range(n_types):  # rank of type j in each bid's order: how many types come before it (T is small)
        rank = np.zeros(n, dtype=np.int64)
        for i in range(n_types):
            if i != j:
                rank += (key[i] < key[j]) if i > j else (key[i] <= key[j])
        flat[base + rank] = np.where(ok_t[j], j, -1)
    # ineligible types sort last (their key is the maximum), so -1 pads the end of each row
    return flat.reshape(n, n_types)


def tie_rank(bids: Bids) -> I64:
    """Rank of every bid by (submit time, job id): the deterministic tie-break after price."""
    n = len(bids)
    in_order = n < 2 or bool(
        np.all(
            (bids.submit[1:] > bids.submit[:-1])
            | ((bids.submit[1:] == bids.submit[:-1]) & (bids.job[1:] > bids.job[:-1]))
        )
    )
    rank = np.arange(n, dtype=np.int64)
    if in_order:
        return rank
    out = np.empty(n, dtype=np.int64)
    out[np.lexsort((bids.job, bids.submit))] = rank
    return out


def market_order(rows: I64, price: I64, rank: I64) -> I64:
    """``rows`` sorted by price desc, then submit time, then job id (ARCHITECTURE.md §Clearing, ties)."""
    if rows.size == 0:
        return rows
    p = price[rows]
    top, span = int(p.max()), int(p.max() - p.min()) + 1
    n = int(rank.shape[0]) + 1
    if span >= (1 << 62) // (n + 1):
        return rows[np.lexsort((rank[rows], -p))]
    if rows.size * 2 < rank.shape[0]:
        return rows[np.argsort((top - p) * n + rank[rows])]
    # most bids: key every bid (no gathers), those outside ``rows`` last, and cut them off
    inside = np.zeros(rank.shape[0], dtype=np.bool_)
    inside[rows] = True
    key = np.where(inside, (top - price) * n + rank, np.iinfo(np.int64).max)
    return np.argsort(key)[: rows.size]


def group_by_tenant(tenant: I32, n_tenants: int) -> I64:
    """Positions of ``tenant`` (bids in market order) grouped by tenant, stable (radix sort on small ids)."""
    small = tenant.astype(np.int16) if n_tenants < 32768 else tenant
    return np.argsort(small, kind="stable").astype(np.int64)


def budget_filter(
    slate: Slate, poor: BOOL, need_at: Callable[[I64], I64], budget_left: I64
) -> tuple[I64, I64]:
    """Budget filter, ARCHITECTURE.md §Clearing step 1: in the tenant's own order, admit bids while their holds
    (at their limit price, the most they can pay) fit the tenant's budget. Only ``poor`` tenants (who might not
    pay for every bid) need the running sum. Returns the refused positions of the slate and their holds."""
    if not poor.any():
        return slate.ten[:0], slate.ten[:0]
    keep = poor[slate.ten_tenant]
    sub, tenant = slate.ten[keep], slate.ten_tenant[keep]
    need = need_at(sub)
    ok = prefix_fit(tenant, need, budget_left)
    return sub[~ok], need[~ok]


def limit_holds(gpus: NDArray[Any], price: I64, max_s: I64) -> I64:
    """The holds of bids if they paid their limit ``price`` (the budget filter's worst case)."""
    return np.asarray(hold_of(gpus, price, max_s), dtype=np.int64)


def tier_g_pos(tenant: I32, gpus: NDArray[Any], unused: I64) -> BOOL:
    """Tier G, ARCHITECTURE.md §Clearing step 2: each tenant's eligible bids (given grouped by tenant, each in
    its own order) are first-fit into its unused guarantee (q minus every GPU it holds)."""
    if not unused.any():
        return np.zeros(tenant.shape[0], dtype=np.bool_)
    return first_fit(tenant, gpus, unused)


def tier_b(tenant: I32, gpus: NDArray[Any], weight: NDArray[np.float64], supply: int) -> tuple[BOOL, I64]:
    """Tier B, ARCHITECTURE.md §Clearing step 3: weighted water-filling of the excess ``supply`` over each
    tenant's demand (its bids at or above p, grouped by tenant), then first-fit into floor(e_t).
    Returns the mask over the bids and the entitlements e_t."""
    demand = np.bincount(tenant, weights=gpus, minlength=weight.shape[0]).astype(np.int64)
    share = water_fill(demand, weight, supply)
    return first_fit(tenant, gpus, share), share


def tier_s(gpus: NDArray[Any], supply: int) -> BOOL:
    """Tier S, ARCHITECTURE.md §Clearing step 4: what is left goes to the highest remaining bids per GPU
    (given in market order), first-fit by count."""
    return first_fit(np.zeros(gpus.shape[0], dtype=np.int64), gpus, np.array([max(supply, 0)]))


def spot_price(reserve: int, posted: int, first_losing: int, lowest_winning: int) -> int:
    """Tier S uniform price, ARCHITECTURE.md §Clearing step 4: max(r, min(first losing bid, lowest winning
    bid, p)). ``first_losing`` is -1 when nobody lost."""
    candidates = [lowest_winning, posted] + ([first_losing] if first_losing >= 0 else [])
    return max(reserve, min(candidates))


def next_posted(
    posted: I64, reserve: I64, cap: I64, demand: I64, supply: I64, step_bp: int, cover: I64 | None = None
) -> I64:
    """Posted price update, ARCHITECTURE.md §Clearing step 7: a multiplicative step up when demand at p exceeds
    supply, down when it falls short, clamped to [r, max]; integer arithmetic, moving by at least one unit.

    A step up never goes past the market-clearing price: ``cover`` is, per type, the highest bid limit at which
    the GPUs asked at or above it still cover the free GPUs (at least one), so p never rises above every bid
    (``covering_price``). None: no cap."""
    up = posted + np.maximum(1, posted * step_bp // 10_000)
    if cover is not None:
        up = np.minimum(up, np.maximum(cover, posted))
    down = posted - np.maximum(1, posted * step_bp // (10_000 + step_bp))
    moved = np.where(demand > supply, up, np.where(demand < supply, down, posted))
    if step_bp == 0:
        moved = posted
    return np.clip(moved, reserve, cap).astype(np.int64)


def covering_price(limit: I64, gpus: NDArray[Any], supply: int, lo: int, hi: int) -> int:
    """The highest bid limit x in [lo, hi) such that the GPUs asked at or above x cover ``supply`` (at least
    one GPU); ``hi`` when the GPUs asked at or above ``hi`` already do. The caller knows that those asked at or
    above ``lo`` do, so the answer is at least ``lo``."""
    need = max(supply, 1)
    above = int(gpus.sum(where=limit >= hi, dtype=np.int64))
    if above >= need:
        return hi
    between = (limit >= lo) & (limit < hi)
    lim, g = limit[between], gpus[between]
    order = np.argsort(-lim, kind="stable")
    reach = above + np.cumsum(g[order], dtype=np.int64)
    return int(lim[order][int(np.searchsorted(reach, need))])
