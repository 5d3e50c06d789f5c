"""Two counting rules the tiers share: first-fit of gangs into caps, and weighted water-filling."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]
Ints = NDArray[np.integer[Any]]  # gang sizes and tenant indices: int32 book columns or int64
F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]


def first_fit(size: Ints, cap: I64, seg: Ints | None = None) -> BOOL:
    """Gangs in order (``size`` by position) take from the cap of their segment (``seg``; None: one segment) each
    one that still fits; one that does not is skipped, a later smaller one may fit. Returns the taken mask.

    How: the running sum per segment picks its prefix that fits at once; after the first gang that does not,
    less room is left than that gang, and each round of the loop takes the next gang that fits per segment."""
    n = size.shape[0]
    taken = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return taken
    if seg is None:
        seg = np.zeros(n, dtype=np.int64)
        order = np.arange(n, dtype=np.int64)
        fits = np.cumsum(size, dtype=np.int64) <= cap[0]
        s, k = seg, size
    else:
        order = group_by(seg)
        s, k = seg[order], size[order]
        per = np.bincount(s, weights=k, minlength=cap.shape[0]).astype(np.int64)
        fits = (
            np.cumsum(k, dtype=np.int64) <= (cap + np.cumsum(per) - per)[s]
        )  # the running sum within each segment
    taken[order[fits]] = True
    room = cap.astype(np.int64) - np.bincount(s[fits], weights=k[fits], minlength=cap.shape[0]).astype(
        np.int64
    )
    tail = order[~fits]
    while tail.size:
        tail = tail[size[tail] <= room[seg[tail]]]
        if tail.size == 0:
            break
        ts = seg[tail]
        head = np.r_[True, ts[1:] != ts[:-1]]
        pick = tail[head]
        taken[pick] = True
        room[seg[pick]] -= size[pick]
        tail = tail[~head]
    return taken


def water_fill(want: F64, weight: F64, supply: float) -> F64:
    """Weighted water-filling (step 3): e_t = min(want_t, w_t * level), sum e = min(supply, sum want)."""
    want = np.asarray(want, dtype=np.float64)
    if want.sum() <= supply:
        return want.copy()
    if supply <= 0:
        return np.zeros_like(want)
    ratio = want / weight
    order = np.argsort(ratio, kind="stable")
    r, w, d = ratio[order], weight[order], want[order]
    below = np.cumsum(d) - d  # want of the tenants filled before this one
    w_rest = np.cumsum(w[::-1])[::-1]
    filled = below + r * w_rest  # what the level r_i hands out
    i = int(np.searchsorted(filled, supply))
    level = (supply - below[i]) / w_rest[i]
    return np.asarray(np.minimum(want, weight * level), dtype=np.float64)


def fill_from(base: F64, cap: F64, weight: F64, supply: float) -> F64:
    """Progressive filling from unequal starts: tenant t receives min(cap_t, max(0, w_t * level - base_t)) with
    the level where the total is ``supply`` (everyone's cap when they fit). Those furthest below, relative to
    weight, receive first. Bisection: the tenants are few, the total is monotone in the level."""
    if cap.sum() <= supply:
        return cap.copy()
    # a base may be negative (a tenant owed GPUs by the fair-share history): start where nobody receives
    lo, hi = min(0.0, float((base / weight).min())), float(((base + cap) / weight).max())
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.minimum(cap, np.maximum(weight * mid - base, 0)).sum() > supply:
            hi = mid
        else:
            lo = mid
    return np.asarray(np.minimum(cap, np.maximum(weight * lo - base, 0)), dtype=np.float64)


def group_by(seg: NDArray[np.integer[Any]]) -> I64:
    """Positions grouped by ``seg`` (non-negative), in their order within each group."""
    bits = max(1, (seg.size - 1).bit_length())
    if seg.size == 0 or int(seg.max()).bit_length() + bits > 62:
        return np.argsort(seg, kind="stable")
    key = seg.astype(np.int64) << bits  # (segment, position) packed: one sort of values, faster than argsort
    key |= np.arange(seg.size, dtype=np.int64)
    key.sort()
    key &= (1 << bits) - 1
    return key
