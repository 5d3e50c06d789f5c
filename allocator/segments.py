"""Vectorised building blocks over items grouped in segments (one segment per tenant, or one for a pool).

Items are given in processing order with a non-decreasing segment id, so each segment is a contiguous run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


def cumsum64(values: NDArray[Any]) -> I64:
    """Inclusive cumulative sum in int64 (widening first: numpy's cumsum of narrower ints into int64 runs a
    casting loop several times slower than a plain int64 cumsum)."""
    out: I64 = np.cumsum(np.asarray(values, dtype=np.int64))
    return out


def segment_starts(seg: NDArray[Any]) -> BOOL:
    """True at the first item of every segment."""
    start = np.ones(seg.shape[0], dtype=np.bool_)
    if seg.shape[0] > 1:
        np.not_equal(seg[1:], seg[:-1], out=start[1:])
    return start


def water_fill(demand: I64, weight: NDArray[np.float64], supply: int) -> I64:
    """Weighted water-filling, integer result: e_t = floor(min(d_t, w_t * L)) with sum e <= supply.

    L is the level at which sum min(d_t, w_t L) = min(supply, sum d). Floors lose at most one GPU per tenant;
    float error is repaired so the integer shares never exceed the supply.
    """
    total = int(demand.sum())
    if total <= supply:
        return demand.astype(np.int64).copy()
    if supply <= 0:
        return np.zeros_like(demand, dtype=np.int64)
    level = _level(demand.astype(np.float64), weight, float(supply))
    share = np.minimum(demand, np.floor(weight * level + 1e-9)).astype(np.int64)
    excess = int(share.sum()) - supply
    if excess > 0:  # float error only: take one GPU back from the largest shares
        for i in np.argsort(-share, kind="stable")[:excess]:
            share[i] -= 1
    return share


def _level(d: NDArray[np.float64], w: NDArray[np.float64], supply: float) -> float:
    ratio = d / w
    order = np.argsort(ratio, kind="stable")
    r, ws, ds = ratio[order], w[order], d[order]
    # Filling up to ratio r[i] satisfies tenants 0..i fully; the rest get w * r[i].
    filled = np.cumsum(ds) - ds + r * (ws.sum() - np.cumsum(ws) + ws)
    i = int(np.searchsorted(filled, supply, side="right"))
    done = float(ds[:i].sum())
    return (supply - done) / float(ws[i:].sum())
