"""Step 1 of ARCHITECTURE.md §Clearing: eligibility, type preference, market order and the budget filter."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import Bids, GpuTypes, hold_of
from allocator.reference.fill import group_by

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
BOOL = NDArray[np.bool_]


def preferences(bids: Bids, types: GpuTypes) -> I32:
    """Eligibility and type preference (step 1). Column j is the type a bid tries in pass j: the types where its
    limit is at least the reserve r, by decreasing margin over the posted price p, ties by type index; -1 pads."""
    limit = bids.limit
    eligible = limit >= types.reserve[None, :]
    if limit.shape[1] == 1:
        return np.where(eligible, 0, -1).astype(np.int32)
    never = np.iinfo(np.int64).max
    key = np.where(eligible, types.posted[None, :] - limit, never)
    order = np.argsort(key, axis=1, kind="stable").astype(np.int32)
    ok = np.take_along_axis(eligible, order, axis=1)
    return np.where(ok, order, -1).astype(np.int32)


class TieRank:
    """The deterministic tie-break after price: every bid's rank by (submit time, job id)."""

    def __init__(self, bids: Bids) -> None:
        n = len(bids)
        sub, job = bids.submit, bids.job
        in_order = n < 2 or bool(
            np.all((sub[1:] > sub[:-1]) | ((sub[1:] == sub[:-1]) & (job[1:] > job[:-1])))
        )
        self.n = n
        self.identity = in_order  # the rank of a row is the row itself
        if in_order:
            self.rank = self.by_rank = np.arange(n, dtype=np.int64)
        else:
            self.by_rank = np.lexsort((job, sub)).astype(np.int64)
            self.rank = np.empty(n, dtype=np.int64)
            self.rank[self.by_rank] = np.arange(n, dtype=np.int64)


def market_order(rows: I64, price: I64, ranks: TieRank) -> tuple[I64, I64]:
    """``rows`` by price desc, then submit time, then job id (step 1 and "Ties"), with their prices in that
    order; ``price`` is by bid row. One sort of packed (price, rank) integers where they fit 63 bits (the
    prices come back out of the sorted keys), else a lexsort."""
    p = price[rows]
    if rows.size < 2:
        return rows, p
    top, low = int(p.max()), int(p.min())
    bits = max(1, (ranks.n - 1).bit_length())
    if (top - low).bit_length() + bits > 62:
        order = np.lexsort((ranks.rank[rows], -p))
        return rows[order], p[order]
    key = np.subtract(top, p, dtype=np.int64)
    key <<= bits
    key |= rows if ranks.identity else ranks.rank[rows]
    key.sort()
    p = top - (key >> bits)
    key &= (1 << bits) - 1
    return (key if ranks.identity else ranks.by_rank[key]), p


def budget_filter(rows: I64, order: I64, price: I64, bids: Bids, budget: I64) -> tuple[BOOL, I64]:
    """Budget filter (step 1): in each tenant's own order (price desc, submit time, job id), its bids (``order``,
    rows in market order) are admitted while their holds at the limit price fit its budget; from the first that
    does not, none. Returns the refused mask (by position of ``order``) and the holds at the limit of the
    bids walked (by bid row; -1 elsewhere: ``hold_of`` gives the others where needed). Only the tenants whose holds together exceed their budget are walked."""
    need = np.full(len(bids), -1, dtype=np.int64)
    every = rows.size == len(bids)  # (then no gathers: rows is every row in order)
    gpus, max_s, tenant = (
        (bids.gpus, bids.max_s, bids.tenant)
        if every
        else (bids.gpus[rows], bids.max_s[rows], bids.tenant[rows])
    )
    approx = gpus * (price if every else price[rows]) * (max_s / 3600.0)
    total = np.bincount(tenant, weights=approx, minlength=budget.shape[0])
    refused = np.zeros(order.shape[0], dtype=np.bool_)
    poor = total > budget * (1 - 1e-9) - len(bids)  # float sums: a tenant this close is walked, exactly
    if not poor.any():
        return refused, need
    poor_row = poor[bids.tenant]  # by row (sequential reads), then one byte per bid in market order
    pos = np.flatnonzero(poor_row[order])  # positions in market order: each tenant's in its own order
    r = order[pos]
    need[r] = hold_of(bids.gpus[r], price[r], bids.max_s[r])
    m = bids.tenant[r]
    by_tenant = group_by(m)
    pos, r, m = pos[by_tenant], r[by_tenant], m[by_tenant]
    spent = np.cumsum(need[r])
    first = np.r_[True, m[1:] != m[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(pos.size), 0))
    before = spent[start] - need[r[start]]
    refused[pos] = spent - before > budget[m]  # a prefix: the running sum only grows
    return refused, need
