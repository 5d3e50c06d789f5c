"""Step 7 of ARCHITECTURE.md §Clearing: the posted price of each type for the next round."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import Book
from allocator.reference.tiers import excess

I64 = NDArray[np.int64]


def clearing_price(limits: I64, gpus: I64, excess_gpus: int, floor: int) -> int:
    """The highest bid price at which the GPUs asked at or above it still cover the excess (``floor`` when no
    price does): the price at which demand for the excess equals the excess, as far as the bids tell."""
    ok = limits >= floor
    limits, gpus = limits[ok], gpus[ok]
    if limits.size == 0 or int(gpus.sum()) < excess_gpus:
        return floor
    order = np.argsort(-limits, kind="stable")
    reach = np.cumsum(gpus[order])
    return int(limits[order][int(np.searchsorted(reach, max(excess_gpus, 1)))])


def next_posted(book: Book, schedulable: I64) -> I64:
    """Posted price update (step 7): p rises toward the clearing price of the excess by a multiplicative step
    (``policy.price_step_bp``) and is never above it (so it falls to it at once), clamped to [r, max]. Demand is every eligible pending bid; the
    excess is the type's schedulable GPUs less what tenants use within their guarantees. When every bid sits at
    r, p stays at r. Only bids between r and one step above p are sorted: above that, a count decides."""
    types, bids, step = book.types, book.bids, book.policy.price_step_bp
    held = book.tenants.held.sum(axis=1)
    out = np.empty(len(types), dtype=np.int64)
    for t in range(len(types)):
        p, r, top = int(types.posted[t]), int(types.reserve[t]), int(types.max_price[t])
        e = excess(int(schedulable[t]), held[:, t], book.tenants.guarantee[:, t])
        limit, gpus = bids.limit[:, t], bids.gpus.astype(np.int64)
        if not step:
            out[t] = min(max(p, r), top)
            continue
        up = min(p + max(1, p * step // 10_000), top)
        above = int(gpus[limit >= up].sum())
        if above >= max(e, 1):
            out[t] = up
            continue
        window = (limit >= r) & (limit < up)
        target = clearing_price(limit[window], gpus[window], e - above, r)
        nxt = target if target < p else min(target, up)
        out[t] = min(max(nxt, r), top)
    return out
