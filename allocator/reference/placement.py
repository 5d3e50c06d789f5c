"""Step 5 of ARCHITECTURE.md §Clearing: gangs onto nodes (reservations and backfill: reserve.py).

A gang that fits a node lands on one node, best fit (the open node with the fewest free GPUs that holds it, ties
by node index); a larger gang takes whole free nodes of one topology domain (the domain with the least whole-free
capacity that suffices). Running leases never move; nodes reserved for a starving gang take no other work.

Gangs of one size k placed one after another by best fit fill a node completely (floor(f / k) gangs) before the
next, because a node left with f - k >= k free is still the best fit. So one size class is placed in one pass
over the nodes ordered by free count (``best_fit``), not one search per gang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator.book import Nodes

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


@dataclass
class Placed:
    """One batch of placements of one tier and type: gang ``row[i]`` takes ``count[i]`` GPUs of ``node[i]``, the
    node's free slots from ``offset[i]`` on (slots handed out in ascending order); a gang on several nodes has one
    entry per node, consecutive. ``slots``: explicit slots instead (reclaim: GPUs freed by preemption)."""

    row: I64
    node: I64
    count: I64
    offset: I64
    tier: int
    gpu_type: int
    slots: I64 | None = None


@dataclass
class Floor:
    """The placement state of one round: free GPUs and reservations by node, and every placement in order."""

    nodes: Nodes
    free: I64
    initial_free: I64
    reserved: BOOL
    touched: BOOL  # took new work this round: never held idle for a starving gang
    type_nodes: list[I64]
    max_cap: I64
    batches: list[Placed] = field(default_factory=list)
    spread: bool = False  # some gang spans several nodes (then a batch has several entries for it)
    reserved_for: dict[int, int] = field(default_factory=dict)  # node -> job
    reserved_start: dict[int, int] = field(default_factory=dict)  # node -> the gang's expected start there
    backfilled: list[int] = field(default_factory=list)  # bid rows started by backfill on reserved nodes

    @classmethod
    def of(cls, nodes: Nodes, n_types: int) -> Floor:
        free = nodes.free_count.astype(np.int64)
        gtype = nodes.gpu_type
        max_cap = np.array(
            [int(nodes.capacity[gtype == t].max(initial=0)) for t in range(n_types)], dtype=np.int64
        )
        return cls(
            nodes,
            free.copy(),
            free,
            np.zeros(len(nodes), dtype=np.bool_),
            np.zeros(len(nodes), dtype=np.bool_),
            [np.flatnonzero(gtype == t) for t in range(n_types)],
            max_cap,
        )

    def open_nodes(self, t: int) -> I64:
        ix = self.type_nodes[t]
        return ix[~self.reserved[ix]] if self.reserved_for else ix

    def free_open(self, t: int) -> int:
        return int(self.free[self.open_nodes(t)].sum())

    def take(self, rows: I64, node: I64, count: I64, tier: int, t: int) -> None:
        """Record placements on ``node`` (grouped by node) and take their GPUs."""
        before = np.cumsum(count) - count
        first = np.r_[True, node[1:] != node[:-1]] if node.size else np.zeros(0, dtype=np.bool_)
        start = np.maximum.accumulate(np.where(first, np.arange(node.size), 0))
        self.record(rows, node, count, before - before[start], tier, t)

    def record(self, rows: I64, node: I64, count: I64, within: I64, tier: int, t: int) -> None:
        """Record placements whose ``within``: GPUs of the batch placed before them on their node."""
        offset = self.initial_free[node] - self.free[node] + within
        self.batches.append(Placed(rows, node, count, offset, tier, t))
        self.free -= np.bincount(node, weights=count, minlength=self.free.shape[0]).astype(np.int64)
        self.touched[node] = True


def best_fit(floor: Floor, t: int, k: int, rows: I64, tier: int) -> BOOL:
    """Place gangs of k GPUs (``rows``, in priority order) each on one node, best fit. Returns the placed mask."""
    placed = np.zeros(rows.shape[0], dtype=np.bool_)
    ix = floor.open_nodes(t)
    f = floor.free[ix]
    ix, f = ix[f >= k], f[f >= k]
    if ix.size == 0 or rows.size == 0:
        return placed
    by_free = np.argsort(f.astype(np.int16) if f.max() < 1 << 15 else f, kind="stable")
    ix, per = ix[by_free], f[by_free] // k
    ends = np.cumsum(per)
    n = int(min(rows.shape[0], ends[-1]))
    busy = int(np.searchsorted(ends, n)) + 1  # nodes that take a gang
    ix, per = ix[:busy], per[:busy]
    if n:  # gangs in priority order onto nodes in best-fit order, floor(f / k) each: grouped by node already
        node = np.repeat(ix, per)[:n]
        used = np.repeat(floor.initial_free[ix] - floor.free[ix] - k * (np.cumsum(per) - per), per)[:n]
        offset = used + k * np.arange(n)  # the node's next free slot, then k more for each gang after
        floor.batches.append(Placed(rows[:n], node, np.full(n, k, dtype=np.int64), offset, tier, t))
        taken = np.zeros(ix.size, dtype=np.int64)
        taken[: per.size] = per
        taken[per.size - 1] -= int(per.sum()) - n  # the last node may take fewer
        floor.free[ix] -= k * taken
        floor.touched[ix[taken > 0]] = True
    placed[:n] = True
    return placed


def whole_node_choice(floor: Floor, t: int, k: int) -> tuple[I64, I64]:
    """Whole free nodes of one domain for a gang larger than any node: (nodes, GPUs taken on each)."""
    ix = floor.open_nodes(t)
    cap = floor.nodes.capacity[ix].astype(np.int64)
    whole = ix[floor.free[ix] == cap]
    wcap = floor.nodes.capacity[whole].astype(np.int64)
    if whole.size == 0:
        return whole, wcap
    dom = floor.nodes.domain[whole]
    per = np.bincount(dom, weights=wcap)
    good = np.flatnonzero(per >= k)
    if good.size == 0:
        return whole[:0], wcap[:0]
    d = good[np.argmin(per[good])]
    members, mcap = whole[dom == d], wcap[dom == d]
    order = np.lexsort((members, -mcap))
    members, mcap = members[order], mcap[order]
    take = np.clip(k - (np.cumsum(mcap) - mcap), 0, mcap)
    keep = take > 0
    by_node = np.argsort(members[keep], kind="stable")
    return members[keep][by_node], take[keep][by_node]


def place_one(floor: Floor, t: int, k: int, row: int, tier: int) -> bool:
    """Place a single gang: best fit on one node, or whole nodes of one domain when larger than any node."""
    if k > floor.max_cap[t]:
        nodes, take = whole_node_choice(floor, t, k)
        if nodes.size == 0:
            return False
        floor.take(np.full(nodes.size, row, dtype=np.int64), nodes, take, tier, t)
        floor.spread = True
        return True
    ix = floor.open_nodes(t)
    f = np.where(floor.free[ix] >= k, floor.free[ix], np.iinfo(np.int64).max)
    if ix.size == 0 or f.min() == np.iinfo(np.int64).max:
        return False
    best = int(ix[int(np.argmin(f))])  # fewest free GPUs that hold it, the first of equals
    one = np.array([row], dtype=np.int64)
    floor.record(one, np.array([best]), np.array([k], dtype=np.int64), one * 0, tier, t)
    return True


def largest_fit(floor: Floor, t: int) -> int:
    """The largest gang that could still be placed in type ``t`` now (reserved nodes excluded)."""
    ix = floor.open_nodes(t)
    if ix.size == 0:
        return 0
    free = floor.free[ix]
    single = int(free.max())
    cap = floor.nodes.capacity[ix]
    whole = free == cap
    if not whole.any():
        return single
    per = np.bincount(floor.nodes.domain[ix][whole], weights=cap[whole])
    return max(single, int(per.max()))


def free_slots(nodes: Nodes) -> tuple[I64, I64]:
    """Every node's free slots in ascending order, as (start of each node's list, the list)."""
    width = nodes.free.shape[1]
    flat = np.flatnonzero(nodes.free)  # row-major: by node, each node's slots ascending
    ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(nodes.free_count, out=ptr[1:])
    return ptr, flat % width if width else flat
