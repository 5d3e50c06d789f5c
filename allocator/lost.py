"""Work a preemption throws away: the one figure (docs/rounds.md §Lost work) that reclaim ranks victims on
(``Leases.lost_gpu_s``), the round commit records on the preempted lease (``Lease.lost_gpu_s``), the job page and
the console show, and the simulator counts (``SimState.preempt``).

The restart rule, stated once: a preempted job restarts from its last checkpoint, so what it computed since the
later of its (re)start in this lease and its last checkpoint is redone; a job that has not started running yet
has lost nothing. Times are whole seconds (the frozen book's clock), so every caller gets the same integer.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]


def lost_since(running: int | None, checkpoint: int | None, now: int) -> int:
    """The moment from which a preemption at ``now`` throws work away: the later of the job's (re)start in this
    lease (``running``) and its last checkpoint; ``now`` (nothing to lose) while the job is not running yet."""
    if running is None:
        return now
    return running if checkpoint is None else max(running, checkpoint)


@overload
def lost_gpu_s(gpus: int, since: int, now: int) -> int: ...
@overload
def lost_gpu_s(gpus: NDArray[Any], since: NDArray[Any], now: int) -> I64: ...
def lost_gpu_s(gpus: int | NDArray[Any], since: int | NDArray[Any], now: int) -> int | I64:
    """GPU-seconds a preemption at ``now`` throws away: ``gpus`` times the seconds since ``since``
    (``lost_since``), never negative. Scalar in, scalar out; arrays (one entry per lease) in, an int64 array out."""
    if isinstance(gpus, int) and isinstance(since, int):
        return max(now - since, 0) * gpus
    return np.asarray(np.maximum(now - np.asarray(since, dtype=np.int64), 0) * gpus, dtype=np.int64)
