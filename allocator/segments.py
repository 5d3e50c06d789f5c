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
