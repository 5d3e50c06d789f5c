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

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator.book import Nodes
from allocator.kernels import best_fit_run, best_node, fewest_free, free_bitmaps
from allocator.segments import segment_starts

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]


@dataclass(frozen=True)
class Chunk:
    """Placements made by one call, in order: bid ``rows``, the ``node`` of each, ``count`` GPUs each (an int
    when every gang of the call has the same size), from free-slot ``offset`` on; all of one tier and type."""

    rows: I64
    node: I64
    count: int | I64
    offset: I64
    tier: int
    gpu_type: int
    tenant: I32


@dataclass(frozen=True)
class FloorMark:
    """What ``Floor.rewind`` needs to undo the placements made after ``Floor.mark``."""

    free: I64
    reserved: BOOL
    touched: BOOL
    chunks: int
    explicit: int
    multi_node: bool


@dataclass
class Floor:
    """Mutable placement state of one round. Placements are logged as chunks (``Chunk``); ``explicit`` holds
    placements on GPUs freed by preemption (step 6)."""

    nodes: Nodes
    free: I64
    reserved: BOOL
    type_nodes: list[I64]
    max_cap: I64
    chunks: list[Chunk] = field(default_factory=list)
    multi_node: bool = False  # some gang was logged on several nodes (several log entries)
    context: tuple[int, int] = (0, 0)  # (tier, GPU type) of the placements being made, logged with them
    row_tenant: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # tenant of each bid row
    explicit: list[tuple[int, int, I64, int]] = field(default_factory=list)

    @classmethod
    def of(cls, nodes: Nodes, n_types: int, row_tenant: I32 | None = None) -> Floor:
        free = nodes.free_count.astype(np.int64)
        if n_types == 1:
            type_nodes = [np.arange(len(nodes), dtype=np.int64)]
        else:
            by_type = np.argsort(nodes.gpu_type, kind="stable")
            bounds = np.searchsorted(nodes.gpu_type[by_type], np.arange(n_types + 1))
            type_nodes = [by_type[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        max_cap = np.array(
            [int(nodes.capacity[ix].max()) if ix.size else 0 for ix in type_nodes], dtype=np.int64
        )
        floor = cls(nodes, free, np.zeros(len(nodes), dtype=np.bool_), type_nodes, max_cap)
        if row_tenant is not None:
            floor.row_tenant = row_tenant
        return floor

    initial_free: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    touched: BOOL = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    def __post_init__(self) -> None:
        self.initial_free = self.nodes.free_count.astype(np.int64)
        self.touched = np.zeros(len(self.nodes), dtype=np.bool_)  # took new work this round

    def mark(self) -> FloorMark:
        return FloorMark(
            self.free.copy(),
            self.reserved.copy(),
            self.touched.copy(),
            len(self.chunks),
            len(self.explicit),
            self.multi_node,
        )

    def rewind(self, mark: FloorMark) -> None:
        """Undo every placement and reservation made since ``mark``."""
        self.free[:], self.reserved[:], self.touched[:] = mark.free, mark.reserved, mark.touched
        del self.chunks[mark.chunks :]
        del self.explicit[mark.explicit :]
        self.multi_node = mark.multi_node

    def record_explicit(self, row: int, node: int, slots: I64) -> None:
        """Append the placement of ``row`` on named ``slots`` of ``node`` (step 6: free slots and slots freed
        by preemption), whose GPUs the caller has already taken."""
        self.touched[node] = True
        self.explicit.append((row, node, slots, self.context[1]))

    def record(self, rows: I64, node: I64, count: int | I64, offset: I64, tenant: I32 | None = None) -> None:
        """Append placements whose GPUs the caller has already taken (``offset``: first free slot used;
        ``tenant``: the tenant of each row, looked up in ``row_tenant`` when not given)."""
        self.touched[node] = True
        owner = self.row_tenant[rows] if tenant is None else tenant
        self.chunks.append(Chunk(rows, node, count, offset, self.context[0], self.context[1], owner))

    def log(self, rows: I64, node: I64, count: I64) -> None:
        """Record placements and take their GPUs (``node`` entries of one call are grouped by node)."""
        used = self.initial_free[node] - self.free[node]
        first = np.flatnonzero(segment_starts(node))
        run_start = np.repeat(first, np.diff(np.append(first, node.shape[0])))
        before = np.cumsum(count) - count
        self.record(rows, node, count, used + before - before[run_start])
        np.subtract.at(self.free, node, count)


def open_nodes(floor: Floor, t: int) -> I64:
    """Nodes of type ``t`` that may take new work."""
    ix = floor.type_nodes[t]
    return ix[~floor.reserved[ix]]


class FreeBuckets:
    """The open nodes of one placement call by free count (``kernels.free_bitmaps``), for best fit: the fewest
    free GPUs that still hold the gang, then node index. ``ix``: the nodes; ``f``: free count of each, kept up
    to date."""

    def __init__(self, ix: I64, f: I64, initial_free: I64) -> None:
        self.ix, self.f = ix, f
        self.used = initial_free[ix] - f  # GPUs of each node handed out before this call: the first offset
        self.bits, self.cursor = free_bitmaps(f)

    def room(self, k: int) -> bool:
        """Whether some node still holds a gang of k."""
        return bool(fewest_free(self.bits, self.cursor, k) >= 0)

    def place(self, floor: Floor, k: int, pos: I64, rows: I64, tenant: I32) -> int:
        """Place the gangs of size k <= node size at positions ``pos``, in order, best fit
        (``kernels.best_fit_run``; ``rows``, ``tenant``: by position); returns how many (a prefix of ``pos``)
        landed."""
        if pos.size == 0:
            return 0
        node, offset = np.empty(pos.shape[0], dtype=np.int64), np.empty(pos.shape[0], dtype=np.int64)
        n = int(best_fit_run(self.bits, self.cursor, self.f, self.used, k, node, offset))
        if n:
            at = pos[:n]
            floor.record(rows[at], self.ix[node[:n]], k, offset[:n], tenant[at])
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
    at = best_node(floor.type_nodes[t], floor.free, floor.reserved, k)
    if at < 0:
        return False
    floor.log(np.array([row], dtype=np.int64), np.array([at], dtype=np.int64), np.array([k], dtype=np.int64))
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


def place_group(
    floor: Floor,
    t: int,
    classes: list[tuple[int, I64]],
    rows: I64,
    tenant: I32,
    placed: BOOL,
    spill: Callable[[], BOOL] | None = None,
) -> bool:
    """Placement of one group of gangs, largest first: ``classes`` holds, per gang size k (descending), the
    positions of the gangs of that size in priority order; ``rows`` and ``tenant`` give the bid row and tenant
    of each position, and ``placed`` (by position) is set for the gangs that land. ``spill()``: by gang size,
    whether gangs of that size wait after this group (the caller left them out); then the placement is not
    final (returns False) as soon as some size runs out of gangs while one more of that size would still have
    landed. Returns True when final."""
    ix = open_nodes(floor, t)
    ix = ix[floor.free[ix] > 0]
    if ix.size == 0 or (not classes and spill is None):
        return True
    extra = spill() if spill is not None else np.zeros(0, dtype=np.bool_)
    span = dict(classes)
    sizes = sorted(set(span) | set(np.flatnonzero(extra).tolist()), reverse=True)
    cap = int(floor.max_cap[t])
    buckets: FreeBuckets | None = None
    none = np.zeros(0, dtype=np.int64)
    for k in sizes:
        pos = span.get(k, none)
        waiting = k < extra.shape[0] and bool(extra[k])
        if k > cap:  # whole nodes, one gang at a time (the largest sizes come first)
            for i in pos.tolist():
                placed[i] = place_whole_nodes(floor, t, k, int(rows[i]))
            if waiting and bool(placed[pos].all()) and whole_node_choice(floor, t, k)[0].size:
                return False
            continue
        if buckets is None:
            ix = ix[floor.free[ix] > 0]
            buckets = FreeBuckets(ix, floor.free[ix], floor.initial_free)
        n = buckets.place(floor, k, pos, rows, tenant)
        placed[pos[:n]] = True
        if waiting and n == pos.size and buckets.room(k):
            floor.free[ix] = buckets.f
            return False
        if not buckets.room(1):
            break
    if buckets is not None:
        floor.free[ix] = buckets.f
    return True


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
    if free.shape[1] < 2:
        return np.ones(free.shape[0], dtype=np.bool_)
    if free.shape[1] <= 8:  # each row as one little-endian 64-bit word of 0/1 bytes
        row = free if free.shape[1] == 8 else np.pad(free, ((0, 0), (0, 8 - free.shape[1])))
        word = np.ascontiguousarray(row).view(np.dtype("<u8"))[:, 0]
        prefix = np.array([(256**c - 1) // 255 for c in range(9)], dtype=np.uint64)
        return np.asarray(word == prefix[floor.initial_free], dtype=np.bool_)
    return np.asarray(~(free[:, 1:] & ~free[:, :-1]).any(axis=1), dtype=np.bool_)


def slots_of_log(floor: Floor, price: I64) -> tuple[I64, I64, I8, I32, I64, I32, I32, I32]:
    """Expand the log into (bid row, GPUs, tier, type, price, tenant per entry; node, slot per GPU), in log
    order; ``price[tier * types + type]`` is what a placement of that tier and type pays. A node's free slots
    are handed out in ascending slot order, in the order gangs landed on it: the slot is the offset itself
    where a node's free slots are 0..free-1 (the usual case), else looked up."""
    chunks = [c for c in floor.chunks if c.rows.size]
    sizes = np.array([c.rows.size for c in chunks], dtype=np.int64)
    widths = [c.rows.size * c.count if isinstance(c.count, int) else int(c.count.sum()) for c in chunks]
    n, n_gpus, n_types = int(sizes.sum()), int(sum(widths)), price.shape[0] // 3
    rows, count, tenant = (
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int32),
    )
    node, slot = np.empty(n_gpus, dtype=np.int32), np.empty(n_gpus, dtype=np.int32)
    gappy = ~_prefix_free(floor)
    lookup = bool(gappy.any())
    if lookup:
        sub = np.flatnonzero(gappy)
        free_slot = np.nonzero(floor.nodes.free[sub])[1].astype(np.int32)
        ptr = np.zeros(gappy.shape[0] + 1, dtype=np.int64)
        ptr[sub + 1] = floor.initial_free[sub]
        ptr = np.cumsum(ptr)
    a = g = 0
    for c, width in zip(chunks, widths, strict=True):
        b, h = a + c.rows.size, g + width
        rows[a:b], tenant[a:b] = c.rows, c.tenant
        if isinstance(c.count, int):
            count[a:b] = c.count
            if c.count == 1:
                node[g:h], slot[g:h] = c.node, c.offset
            else:
                node[g:h].reshape(-1, c.count)[:] = c.node[:, None]
                slot[g:h].reshape(-1, c.count)[:] = c.offset[:, None] + np.arange(c.count)
        else:
            count[a:b] = c.count
            node[g:h] = np.repeat(c.node, c.count)
            slot[g:h] = np.repeat(c.offset - (np.cumsum(c.count) - c.count), c.count) + np.arange(width)
        if lookup:
            at = np.flatnonzero(gappy[node[g:h]]) + g
            slot[at] = free_slot[ptr[node[at]] + slot[at]]
        a, g = b, h
    tiers = np.array([c.tier for c in chunks], dtype=np.int8)
    kinds = np.array([c.gpu_type for c in chunks], dtype=np.int32)
    paid = np.repeat(price[tiers.astype(np.int64) * n_types + kinds], sizes) if n else np.zeros(0, np.int64)
    return rows, count, np.repeat(tiers, sizes), np.repeat(kinds, sizes), paid, tenant, node, slot


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
