"""Placement, ARCHITECTURE.md §Clearing step 5: gangs onto nodes, compiled per placement group.

A gang that fits a node (k <= the largest node of its type) lands on one node, best fit by free count
(the node with the fewest free GPUs that still holds it, ties by node index); a larger gang takes whole free nodes
in one topology domain (the domain with the least whole-free capacity that suffices). Gangs are placed largest
first. Running leases never move. Nodes reserved for a starving gang take no other work.

Gangs of one size k placed in sequence by best fit fill a node completely (floor(f / k) gangs) before the next
node, because a node left with f - k >= k free becomes the best fit. So one size class visits each node once
(``kernels.best_fit_run``, over one bitmap of nodes per free count), not once per gang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator import kernels
from allocator.book import TIER_B, TIER_G, TIER_S, Nodes
from allocator.kernels import (
    best_node,
    free_slot_lookup,
    nodes_by_type,
    open_free,
    place_sizes,
    roomiest_node,
)
from allocator.segments import segment_starts

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]


@dataclass(frozen=True)
class FloorMark:
    """What ``Floor.rewind`` needs to undo the placements made after ``Floor.mark``."""

    free: I64
    reserved: BOOL
    touched: BOOL
    entries: int
    explicit: int


@dataclass
class Floor:
    """Mutable placement state of one round. Placements are logged in one flat log (``log_*``, the first
    ``entries`` used): per entry the bid row, its node, how many GPUs and from which free-slot offset on, and the
    tier and type of the placement; a gang on several nodes has one entry per node. ``explicit`` holds
    placements on GPUs freed by preemption (step 6), one batch per call of ``reclaim.reclaim_for``.

    Why flat arrays: a round places gangs in a few dozen runs (per group and gang size), and the result needs
    them as columns; appending each run to preallocated columns (a kernel may write straight into them) costs
    a few slice assignments, where a list of per-run arrays cost a concatenation of each column at the end."""

    nodes: Nodes
    free: I64
    reserved: BOOL
    type_nodes: list[I64]
    max_cap: I64
    log_row: I64
    log_node: I64
    log_count: I64
    log_offset: I64
    log_tier: I8
    log_type: I32
    entries: int = 0
    context: tuple[int, int] = (0, 0)  # (tier, GPU type) of the placements being made, logged with them
    explicit: list[tuple[I64, I64, I64, I64, int]] = field(default_factory=list)
    initial_free: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    touched: BOOL = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    unreserved: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, nodes: Nodes, n_types: int, n_bids: int) -> Floor:
        """An empty floor; its log holds ``n_bids`` single-node gangs plus one entry per node for gangs spread
        over several nodes (each such entry takes a whole node), so it never fills."""
        free = nodes.free_count.astype(np.int64)
        by_type = np.empty(len(nodes), dtype=np.int64)
        bounds, max_cap = nodes_by_type(nodes.gpu_type, nodes.capacity, n_types, by_type)
        type_nodes = [by_type[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]
        cap = n_bids + len(nodes)
        return cls(
            nodes,
            free,
            np.zeros(len(nodes), dtype=np.bool_),
            type_nodes,
            max_cap,
            np.empty(cap, dtype=np.int64),
            np.empty(cap, dtype=np.int64),
            np.empty(cap, dtype=np.int64),
            np.empty(cap, dtype=np.int64),
            np.empty(cap, dtype=np.int8),
            np.empty(cap, dtype=np.int32),
        )

    def __post_init__(self) -> None:
        self.initial_free = self.nodes.free_count.astype(np.int64)
        self.unreserved = np.full(len(self.nodes), -1, dtype=np.int64)  # reserved for no job (read only)
        self.touched = np.zeros(len(self.nodes), dtype=np.bool_)  # took new work this round

    def mark(self) -> FloorMark:
        return FloorMark(
            self.free.copy(),
            self.reserved.copy(),
            self.touched.copy(),
            self.entries,
            len(self.explicit),
        )

    def rewind(self, mark: FloorMark) -> None:
        """Undo every placement and reservation made since ``mark``."""
        self.free[:], self.reserved[:], self.touched[:] = mark.free, mark.reserved, mark.touched
        self.entries = mark.entries
        del self.explicit[mark.explicit :]

    def record_explicit(self, rows: I64, node: I64, slots: I64, gpus: I64) -> None:
        """Append the placements of gangs ``rows`` (of ``gpus`` GPUs each) on named slots of one node each,
        ``slots[i, :gpus[i]]`` of ``node[i]`` (step 6: free slots and slots freed by preemption), whose GPUs
        the caller has already taken: one batch, of the type being placed."""
        self.touched[node] = True
        self.explicit.append((rows, node, slots, gpus, self.context[1]))

    def record(self, rows: I64, node: I64, count: int | I64, offset: I64) -> None:
        """Append placements whose GPUs the caller has already taken (``offset``: first free slot used)."""
        a = self.entries
        b = a + rows.shape[0]
        self.log_row[a:b], self.log_node[a:b], self.log_count[a:b], self.log_offset[a:b] = (
            rows,
            node,
            count,
            offset,
        )
        self.log_tier[a:b], self.log_type[a:b] = self.context
        self.entries = b
        self.touched[node] = True

    def logged(self) -> tuple[I64, I64, I64, I64, I8, I32]:
        """The entries logged so far: (row, node, count, offset, tier, type) per entry."""
        n = self.entries
        return (
            self.log_row[:n],
            self.log_node[:n],
            self.log_count[:n],
            self.log_offset[:n],
            self.log_tier[:n],
            self.log_type[:n],
        )

    def take_one(self, row: int, node: int, k: int) -> None:
        """Place one gang on one node: its next ``k`` free slots (``log`` for a single entry, without arrays)."""
        e = self.entries
        self.log_row[e], self.log_node[e], self.log_count[e] = row, node, k
        self.log_offset[e] = self.initial_free[node] - self.free[node]
        self.log_tier[e], self.log_type[e] = self.context
        self.entries = e + 1
        self.touched[node] = True
        self.free[node] -= k

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


def free_open(floor: Floor, t: int) -> int:
    """Free GPUs of type ``t`` on the nodes that may take new work."""
    return int(open_free(floor.type_nodes[t], floor.free, floor.reserved))


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
    floor.take_one(row, at, k)
    return True


def place_whole_nodes(floor: Floor, t: int, k: int, row: int) -> bool:
    """Place one gang larger than any node of its type on whole nodes of one domain."""
    nodes, take = whole_node_choice(floor, t, k)
    if nodes.size == 0:
        return False
    order = np.argsort(nodes, kind="stable")
    floor.log(np.full(nodes.size, row, dtype=np.int64)[order], nodes[order], take[order])
    return True


GROUP_TIER = np.array([TIER_G, TIER_B, TIER_S, TIER_S], dtype=np.int8)  # the rest land as spot


def place_groups(
    floor: Floor, t: int, classes: tuple[I64, I64, int], rows: I64, placed: BOOL, spill: BOOL
) -> bool:
    """Placement of the four groups of ``clearing.placement_order`` (G, B, S, the rest), each largest gang
    first. ``classes``: (positions in placement order, where each key starts in it, stride): the gangs of size k
    in group g are at ``order[start[key] : start[key + 1]]`` for key = g * stride + stride - 1 - k, in priority
    order; ``rows`` gives the bid row of each position, and ``placed`` (by position) is set for the gangs that
    land. Gangs larger than any node take whole nodes, one at a time; the rest go to ``kernels.place_sizes``,
    all groups in one call when no gang needs whole nodes. ``spill``: by gang size, whether gangs of that size
    wait after the last group (the caller left them out); then the placement is not final (returns False) as
    soon as some size runs out of gangs while one more of that size would still have landed. Returns True when
    final."""
    order, start, stride = classes
    cap = int(floor.max_cap[t])
    whole = max(stride, spill.shape[0]) - 1 > cap
    log = (floor.log_row, floor.log_node, floor.log_count, floor.log_offset, floor.log_tier, floor.log_type)
    for g0, g1 in [(g, g + 1) for g in range(4)] if whole else [(0, 4)]:
        if whole and not _place_whole(floor, t, classes, g0, rows, placed, spill if g0 == 3 else spill[:0]):
            return False
        ix = open_nodes(floor, t)
        ix = ix[floor.free[ix] > 0]
        if ix.size == 0:
            return True
        floor.entries, final = place_sizes(
            ix,
            floor.free,
            floor.initial_free,
            classes,
            (g0, g1),
            (GROUP_TIER, t),
            rows,
            placed,
            spill,
            log,
            floor.entries,
            floor.touched,
        )
        if not final:
            return False
    return True


def _place_whole(
    floor: Floor, t: int, classes: tuple[I64, I64, int], g: int, rows: I64, placed: BOOL, spill: BOOL
) -> bool:
    """The gangs of group ``g`` larger than any node, largest first, each on whole nodes of one domain; False
    (not final) when a size of ``spill`` ran out of gangs while one more would still have landed."""
    order, start, stride = classes
    floor.context = (int(GROUP_TIER[g]), t)
    for k in range(max(stride, spill.shape[0]) - 1, int(floor.max_cap[t]), -1):
        key = g * stride + stride - 1 - k
        pos = order[start[key] : start[key + 1]] if k < stride else order[:0]
        for i in pos.tolist():
            placed[i] = place_whole_nodes(floor, t, k, int(rows[i]))
        waiting = k < spill.shape[0] and bool(spill[k])
        if waiting and bool(placed[pos].all()) and whole_node_choice(floor, t, k)[0].size:
            return False
    return True


def largest_fit(floor: Floor, t: int) -> int:
    """The largest gang that could still be placed in type ``t`` now (reserved nodes excluded)."""
    nodes = floor.nodes
    return int(
        kernels.largest_fit(floor.type_nodes[t], floor.free, floor.reserved, nodes.capacity, nodes.domain)
    )


def slot_lookup(floor: Floor) -> tuple[BOOL, I64, I32]:
    """For turning free-slot offsets into slots: which nodes are gappy (their free slots are not 0..free-1,
    the usual case where the offset is the slot), where each gappy node's free slots start in the list, and
    the list (``kernels.winner_columns``; built by ``kernels.free_slot_lookup``)."""
    free = np.ascontiguousarray(floor.nodes.free)
    n = free.shape[0]
    gappy, ptr = np.empty(n, dtype=np.bool_), np.empty(n + 1, dtype=np.int64)
    free_slot = np.empty(int(floor.initial_free.sum()), dtype=np.int32)
    return gappy, ptr, free_slot[: free_slot_lookup(free, gappy, ptr, free_slot)]


def reserve_for(floor: Floor, t: int, k: int) -> I64:
    """No starvation, ARCHITECTURE.md §Clearing step 5: reserve nodes for a gang that has waited too long and
    does not fit now (like Slurm's backfill reservations): the node of its type with the most free GPUs that is
    large enough, or for a gang larger than any node the nodes of the domain with the most free GPUs. Reserved
    nodes take no new work this round, so they drain towards the gang as leases end."""
    nodes = floor.nodes
    if k <= floor.max_cap[t]:  # a node that already took new work this round cannot be held idle
        j = roomiest_node(floor.type_nodes[t], floor.free, floor.reserved, floor.touched, nodes.capacity, k)
        chosen = np.array([j] if j >= 0 else [], dtype=np.int64)
    else:
        ix = open_nodes(floor, t)
        ix = ix[~floor.touched[ix]]
        cap = nodes.capacity[ix].astype(np.int64)
        dom = nodes.domain[ix]
        per_cap = np.bincount(dom, weights=cap)
        good = np.flatnonzero(per_cap >= k)
        if good.size == 0:
            return ix[:0]
        per_free = np.bincount(dom, weights=floor.free[ix].astype(np.float64))
        d = good[int(np.argmax(per_free[good]))]
        members = ix[dom == d]
        members = members[np.lexsort((members, -floor.free[members]))]
        mcap = nodes.capacity[members].astype(np.int64)
        chosen = members[np.cumsum(mcap) - mcap < k]
    floor.reserved[chosen] = True
    return chosen
