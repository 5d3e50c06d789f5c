"""Piecewise-constant functions of time built from intervals: sampled at instants, integrated over bins."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Steps:
    """f(t) = sum of weights of intervals [start, end) containing t; right-continuous, like a clock tick
    that sees a job started at t but not a job that ended at t."""

    def __init__(self, start: IntArray, end: IntArray, weight: npt.ArrayLike) -> None:
        w = np.broadcast_to(np.asarray(weight, dtype=np.float64), start.shape)
        times = np.concatenate((start, end)).astype(np.int64)
        delta = np.concatenate((w, -w))
        order = np.argsort(times, kind="stable")
        times, delta = times[order], delta[order]
        self.times, first = np.unique(times, return_index=True)
        self.level = np.cumsum(delta)[np.r_[first[1:] - 1, len(delta) - 1]] if len(delta) else np.zeros(0)
        # area[i] = integral of f from times[0] up to times[i]; f is linear in between, so interp is exact.
        widths = np.diff(self.times).astype(np.float64)
        self.area = np.concatenate(([0.0], np.cumsum(self.level[:-1] * widths)))

    def at(self, t: npt.ArrayLike) -> FloatArray:
        t = np.asarray(t, dtype=np.int64)
        if len(self.times) == 0:
            return np.zeros(t.shape)
        i = np.searchsorted(self.times, t, side="right") - 1
        return np.where(i >= 0, self.level[np.maximum(i, 0)], 0.0)

    def integral(self, edges: npt.ArrayLike) -> FloatArray:
        """Integral of f over each bin [edges[k], edges[k+1])."""
        edges = np.asarray(edges, dtype=np.float64)
        if len(self.times) == 0:
            return np.zeros(max(len(edges) - 1, 0))
        cumulative = np.interp(edges, self.times.astype(np.float64), self.area)
        return np.diff(cumulative)
