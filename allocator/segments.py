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


def seg_cumsum(seg: NDArray[Any], values: NDArray[Any]) -> I64:
    """Inclusive cumulative sum of ``values`` restarting at every segment."""
    if values.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    cs = cumsum64(values)
    start = segment_starts(seg)
    base = (cs - values)[start]
    out: I64 = cs - np.repeat(base, np.diff(np.append(np.flatnonzero(start), seg.shape[0])))
    return out


def prefix_fit(seg: NDArray[Any], size: NDArray[Any], cap: NDArray[Any]) -> BOOL:
    """Admit items of each segment while their running total fits ``cap[seg]`` (stops at the first miss)."""
    return np.asarray(seg_cumsum(seg, size) <= cap[seg], dtype=np.bool_)


def first_fit(seg: NDArray[Any], size: NDArray[Any], cap: NDArray[Any]) -> BOOL:
    """Sequential first-fit of items into ``cap[seg]``, skipping items that do not fit, vectorised.

    Every segment's fitting prefix comes from one global cumsum and a searchsorted per segment; then the
    segments that stopped with room left scan on, one item per segment per step, for a few steps (what is left
    is smaller than the item that stopped it, so the next small item usually ends it); the rare segments still
    open after that finish with ``_first_fit_rounds`` on their remaining items.
    """
    rem = np.asarray(cap, dtype=np.int64).copy()
    if rem.shape[0] == 1:
        return first_fit_one(size, int(rem[0]))[0]
    n = size.shape[0]
    take = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return take
    starts = np.flatnonzero(segment_starts(seg))
    ends = np.append(starts[1:], n)
    ids = seg[starts].astype(np.int64)
    cs = cumsum64(size)
    base = cs[starts] - size[starts]
    stop = np.clip(np.searchsorted(cs, base + rem[ids], side="right"), starts, ends)
    edge = np.zeros(n + 1, dtype=np.int64)
    np.add.at(edge, starts, 1)
    np.add.at(edge, stop, -1)
    take[:] = cumsum64(edge[:-1]) > 0
    rem[ids] -= np.where(stop > starts, cs[np.maximum(stop, 1) - 1] - base, 0)
    live = np.flatnonzero((stop < ends) & (rem[ids] > 0))
    ptr = stop + 1  # the item at ``stop`` is the one that did not fit
    for _ in range(16):
        live = live[ptr[live] < ends[live]]
        if live.size == 0:
            return take
        at, who = ptr[live], ids[live]
        z = size[at]
        fit = z <= rem[who]
        take[at[fit]] = True
        rem[who[fit]] -= z[fit]
        ptr[live] += 1
        live = live[rem[who] > 0]
    live = live[ptr[live] < ends[live]]
    if live.size:
        length = ends[live] - ptr[live]
        idx = np.repeat(ptr[live] - (np.cumsum(length) - length), length) + np.arange(int(length.sum()))
        _first_fit_rounds(idx[size[idx] <= rem[seg[idx]]], seg, size, rem, take)
    return take


def _first_fit_rounds(idx: I64, seg: NDArray[Any], size: NDArray[Any], rem: I64, take: BOOL) -> None:
    """First-fit of the candidates ``idx`` (in order, grouped by segment) into ``rem``, in rounds: each round
    admits the fitting prefix of every segment; the item that stopped it (and every later item too large for
    what is left) can never fit, so it is dropped. What is left shrinks by at least one unit per round once a
    segment is blocked, so there are at most ``max(size) + 1`` rounds."""
    while idx.size:
        s, z = seg[idx], size[idx]
        ok = seg_cumsum(s, z) <= rem[s]
        take[idx[ok]] = True
        rem -= np.bincount(s[ok], weights=z[ok], minlength=rem.shape[0]).astype(np.int64)
        rest = idx[~ok]
        idx = _useful(rest[size[rest] <= rem[seg[rest]]], seg, size, rem)


def _useful(idx: I64, seg: NDArray[Any], size: NDArray[Any], rem: I64) -> I64:
    """Of the candidates ``idx``, keep per segment only the first floor(rem / v) items of each size v: first-fit
    takes a prefix of the items of any one size (once one is skipped, later ones are too), at most that many."""
    if idx.shape[0] < 4096:
        return idx
    keep = np.zeros(idx.shape[0], dtype=np.bool_)
    z, s = size[idx], seg[idx]
    for v in np.unique(z).tolist():
        at = np.flatnonzero(z == v)
        keep[at] = seg_cumsum(s[at], np.ones(at.shape[0], dtype=np.int64)) <= rem[s[at]] // v
    return idx[keep]


def first_fit_one(size: NDArray[Any], cap: int) -> tuple[BOOL, int]:
    """``first_fit`` for a single segment: the fitting prefix at once, then the few items that still fit what
    is left (fewer than the largest item), each found by scanning forward in windows. Also returns what is
    left of ``cap``."""
    take = np.zeros(size.shape[0], dtype=np.bool_)
    if cap <= 0 or size.shape[0] == 0:
        return take, max(cap, 0)
    cs = cumsum64(size)
    n = int(np.searchsorted(cs, cap, side="right"))
    take[:n] = True
    rem, pos = cap - (int(cs[n - 1]) if n else 0), n
    while rem > 0 and pos < size.shape[0]:
        hit = np.flatnonzero(size[pos : pos + 4096] <= rem)
        if hit.size == 0:
            pos += 4096
            continue
        pos += int(hit[0])
        take[pos] = True
        rem -= int(size[pos])
        pos += 1
    return take, rem


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
