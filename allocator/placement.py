"""Placement, ARCHITECTURE.md §Clearing step 5: gangs onto nodes, vectorised per gang size.

A gang that fits a node (k <= the largest node of its type) lands on one node, best fit by free count
(the node with the fewest free GPUs that still holds it, ties by node index); a larger gang takes whole free nodes
in one topology domain (the domain with the least whole-free capacity that suffices). Gangs are placed largest
first. Running leases never move. Nodes reserved for a starving gang take no other work.

Gangs of one size k placed in sequence by best fit fill a node completely (floor(f / k) gangs) before the next
node, because a node left with f - k >= k free becomes the best fit. So one size class is a cumsum and a
searchsorted over nodes sorted by (free, index), not a loop over gangs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator.book import Nodes
from allocator.segments import segment_starts

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


@dataclass
class Floor:
    """Mutable placement state of one round. Placements are logged as (bid row, node, count, first free-slot
    offset on the node); ``explicit_*`` holds placements on GPUs freed by preemption (step 6)."""

    nodes: Nodes
    free: I64
    reserved: BOOL
    type_nodes: list[I64]
    max_cap: I64
    log_row: list[I64] = field(default_factory=list)
    log_node: list[I64] = field(default_factory=list)
    log_count: list[I64] = field(default_factory=list)
    log_offset: list[I64] = field(default_factory=list)
    log_tier: list[NDArray[np.int8]] = field(default_factory=list)
    log_type: list[NDArray[np.int16]] = field(default_factory=list)
    multi_node: bool = False  # some gang was logged on several nodes (several log entries)
    context: tuple[int, int] = (0, 0)  # (tier, GPU type) of the placements being made, logged with them
    explicit: list[tuple[int, int, I64, int]] = field(default_factory=list)

    @classmethod
    def of(cls, nodes: Nodes, n_types: int) -> Floor:
        free = nodes.free_count.astype(np.int64)
        type_nodes = [np.flatnonzero(nodes.gpu_type == t).astype(np.int64) for t in range(n_types)]
        max_cap = np.array(
            [int(nodes.capacity[ix].max()) if ix.size else 0 for ix in type_nodes], dtype=np.int64
        )
        return cls(nodes, free, np.zeros(len(nodes), dtype=np.bool_), type_nodes, max_cap)

    initial_free: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    touched: BOOL = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    def __post_init__(self) -> None:
        self.initial_free = self.nodes.free_count.astype(np.int64)
        self.touched = np.zeros(len(self.nodes), dtype=np.bool_)  # took new work this round

    def free_slots(self, node: int) -> I64:
        """The slots of ``node`` still free now (a node's free slots are handed out in ascending order)."""
        used = int(self.initial_free[node] - self.free[node])
        return np.flatnonzero(self.nodes.free[node])[used:].astype(np.int64)

    def take_explicit(self, row: int, node: int, from_free: int, extra: I64) -> None:
        """Place ``row`` on ``node``: its first ``from_free`` free slots plus the freed slots ``extra``."""
        slots = np.concatenate([self.free_slots(node)[:from_free], extra]).astype(np.int64)
        self.touched[node] = True
        self.free[node] -= from_free
        self.explicit.append((row, node, slots, self.context[1]))

    def record(self, rows: I64, node: I64, count: I64, offset: I64) -> None:
        """Append placements whose GPUs the caller has already taken (``offset``: first free slot used)."""
        self.touched[node] = True
        self.log_row.append(rows)
        self.log_node.append(node)
        self.log_count.append(count)
        self.log_offset.append(offset)
        self.log_tier.append(np.full(rows.shape[0], self.context[0], dtype=np.int8))
        self.log_type.append(np.full(rows.shape[0], self.context[1], dtype=np.int16))

    def log(self, rows: I64, node: I64, count: I64) -> None:
        """Record placements and take their GPUs (``node`` entries of one call are grouped by node)."""
        used = self.initial_free[node] - self.free[node]
        first = np.flatnonzero(segment_starts(node))
        run_start = np.repeat(first, np.diff(np.append(first, node.shape[0])))
        before = np.cumsum(count) - count
        self.record(rows, node, count, used + before - before[run_start])
        self.free -= np.bincount(node, weights=count, minlength=self.free.shape[0]).astype(np.int64)


def open_nodes(floor: Floor, t: int) -> I64:
    """Nodes of type ``t`` that may take new work."""
    ix = floor.type_nodes[t]
    return ix[~floor.reserved[ix]]


def best_fit_nodes(f: I64, k: int, gangs: int) -> I64:
    """Local indices of the nodes that best fit ``gangs`` gangs of size k, in best-fit order (free count, then
    index), only as many as needed: whole free-count buckets below the last one needed, and just the first nodes
    of that last bucket."""
    hist = np.bincount(f, minlength=k + 1)
    fits = np.arange(hist.shape[0])
    room = np.cumsum(np.where(fits >= k, hist * (fits // k), 0))
    top = min(int(np.searchsorted(room, gangs)), hist.shape[0] - 1)
    below = np.flatnonzero((f >= k) & (f < top))
    below = below[np.argsort(f[below].astype(np.int16), kind="stable")]
    short = gangs - (int(room[top - 1]) if top > 0 else 0)
    last = np.flatnonzero(f == top)[: max(0, -(-short // (top // k)))] if top >= k else below[:0]
    return np.concatenate([below, last])


def place_size_class(floor: Floor, ix: I64, f: I64, k: int, rows: I64) -> int:
    """Place gangs of size k <= node size in order, best fit, on nodes ``ix`` whose free counts ``f`` (updated
    in place) the caller holds; returns how many gangs (a prefix of ``rows``) landed."""
    if rows.size == 0:
        return 0
    cand = best_fit_nodes(f, k, rows.size)
    if cand.size == 0:
        return 0
    per = f[cand] // k
    n = min(rows.size, int(per.sum()))
    local = np.repeat(cand, per)[:n]
    first = np.cumsum(per) - per
    rank = np.arange(n) - np.repeat(first, per)[:n]
    node = ix[local]
    floor.record(
        rows[:n], node, np.full(n, k, dtype=np.int64), floor.initial_free[node] - f[local] + k * rank
    )
    f -= np.bincount(local, minlength=f.shape[0]) * k
    return n


def whole_node_choice(floor: Floor, t: int, k: int) -> tuple[I64, I64]:
    """Whole free nodes in one domain for a gang larger than any node: (nodes, GPUs taken on each)."""
    ix = open_nodes(floor, t)
    cap = floor.nodes.capacity[ix].astype(np.int64)
    whole = ix[floor.free[ix] == cap]
    wcap = floor.nodes.capacity[whole].astype(np.int64)
    dom = floor.nodes.domain[whole]
    if whole.size == 0:
        return whole, wcap
    per = np.bincount(dom, weights=wcap)
    good = np.flatnonzero(per >= k)
    if good.size == 0:
        return whole[:0], wcap[:0]
    d = good[np.argmin(per[good])]
    members, mcap = whole[dom == d], wcap[dom == d]
    order = np.lexsort((members, -mcap))
    members, mcap = members[order], mcap[order]
    before = np.cumsum(mcap) - mcap
    take = np.clip(k - before, 0, mcap)
    return members[take > 0], take[take > 0]


def place_one(floor: Floor, t: int, k: int, row: int) -> bool:
    """Place a single gang, best fit (the open node with the fewest free GPUs that still holds it)."""
    if k > floor.max_cap[t]:
        return place_whole_nodes(floor, t, k, row)
    ix = open_nodes(floor, t)
    f = floor.free[ix]
    if not ix.size or int(f.max()) < k:
        return False
    at = int(np.argmin(np.where(f >= k, f, np.iinfo(np.int64).max)))
    floor.log(np.array([row], dtype=np.int64), ix[at : at + 1], np.array([k], dtype=np.int64))
    return True


def place_whole_nodes(floor: Floor, t: int, k: int, row: int) -> bool:
    """Place one gang larger than any node of its type on whole nodes of one domain."""
    nodes, take = whole_node_choice(floor, t, k)
    if nodes.size == 0:
        return False
    order = np.argsort(nodes, kind="stable")
    floor.multi_node = floor.multi_node or nodes.size > 1
    floor.log(np.full(nodes.size, row, dtype=np.int64)[order], nodes[order], take[order])
    return True


def place_rows(floor: Floor, t: int, rows: I64, size: NDArray[np.integer[Any]]) -> BOOL:
    """Placement of one group of gangs (``rows`` in priority order, gang sizes ``size``), largest gangs first;
    returns the placed mask."""
    placed = np.zeros(rows.shape[0], dtype=np.bool_)
    ix = open_nodes(floor, t)
    ix = ix[floor.free[ix] > 0]
    if rows.size == 0 or ix.size == 0:
        return placed
    order = np.argsort((-size).astype(np.int16), kind="stable")
    srt = size[order]
    bounds = np.append(np.flatnonzero(segment_starts(srt)), srt.shape[0])
    f = floor.free[ix]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        k, seg = int(srt[a]), order[a:b]
        if k > floor.max_cap[t]:
            floor.free[ix] = f
            for i in seg.tolist():
                placed[i] = place_whole_nodes(floor, t, k, int(rows[i]))
            f = floor.free[ix]
        else:
            placed[seg[: place_size_class(floor, ix, f, k, rows[seg])]] = True
        if not f.any():
            break
    floor.free[ix] = f
    return placed


def largest_fit(floor: Floor, t: int) -> int:
    """The largest gang that could still be placed in type ``t`` now (reserved nodes excluded)."""
    ix = open_nodes(floor, t)
    if ix.size == 0:
        return 0
    single = int(floor.free[ix].max())
    whole = ix[floor.free[ix] == floor.nodes.capacity[ix]]
    if whole.size == 0:
        return single
    per = np.bincount(floor.nodes.domain[whole], weights=floor.nodes.capacity[whole].astype(np.float64))
    return max(single, int(per.max()))


def _prefix_free(floor: Floor) -> BOOL:
    """True for nodes whose free slots are exactly 0 .. free-1."""
    free = floor.nodes.free
    if free.shape[1] == 0:
        return np.ones(free.shape[0], dtype=np.bool_)
    first_busy = np.where(free.all(axis=1), free.shape[1], np.argmin(free, axis=1))
    return np.asarray(first_busy >= floor.initial_free, dtype=np.bool_)


def slots_of_log(floor: Floor) -> tuple[I64, I64, NDArray[np.int8], NDArray[np.int16], I64, I64]:
    """Expand the log into (bid row, GPUs, tier, type per entry; node, slot per GPU), in log order.
    A node's free slots are handed out in ascending slot order, in the order gangs landed on it."""
    if not floor.log_row:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z.astype(np.int8), z.astype(np.int16), z, z
    row = np.concatenate(floor.log_row)
    node = np.concatenate(floor.log_node)
    count = np.concatenate(floor.log_count)
    offset = np.concatenate(floor.log_offset)
    entry = np.repeat(np.arange(row.shape[0]), count)
    within = np.arange(entry.shape[0]) - np.repeat(np.cumsum(count) - count, count)
    gnode = node[entry]
    slot = offset[entry] + within  # the slot itself where a node's free slots are 0..free-1 (the usual case)
    gappy = ~_prefix_free(floor)
    if gappy.any():
        at = np.flatnonzero(gappy[gnode])
        sub = np.flatnonzero(gappy)
        free_slot = np.nonzero(floor.nodes.free[sub])[1]
        ptr = np.zeros(gappy.shape[0] + 1, dtype=np.int64)
        ptr[sub + 1] = floor.initial_free[sub]
        ptr = np.cumsum(ptr)
        slot[at] = free_slot[ptr[gnode[at]] + slot[at]]
    return row, count, np.concatenate(floor.log_tier), np.concatenate(floor.log_type), gnode, slot


def reserve_for(floor: Floor, t: int, k: int) -> I64:
    """No starvation, ARCHITECTURE.md §Clearing step 5: reserve nodes for a gang that has waited too long and
    does not fit now (like Slurm's backfill reservations): the node of its type with the most free GPUs that is
    large enough, or for a gang larger than any node the nodes of the domain with the most free GPUs. Reserved
    nodes take no new work this round, so they drain towards the gang as leases end."""
    ix = open_nodes(floor, t)
    ix = ix[~floor.touched[ix]]  # a node that already took new work this round cannot be held idle
    cap = floor.nodes.capacity[ix].astype(np.int64)
    if k <= floor.max_cap[t]:
        big = ix[cap >= k]
        chosen = big[[int(np.argmax(floor.free[big]))]] if big.size else big
    else:
        dom = floor.nodes.domain[ix]
        per_cap = np.bincount(dom, weights=cap)
        good = np.flatnonzero(per_cap >= k)
        if good.size == 0:
            return ix[:0]
        per_free = np.bincount(dom, weights=floor.free[ix].astype(np.float64))
        d = good[int(np.argmax(per_free[good]))]
        members = ix[dom == d]
        members = members[np.lexsort((members, -floor.free[members]))]
        mcap = floor.nodes.capacity[members].astype(np.int64)
        chosen = members[np.cumsum(mcap) - mcap < k]
    floor.reserved[chosen] = True
    return chosen
