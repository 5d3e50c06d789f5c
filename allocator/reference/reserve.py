"""The head of the line (ARCHITECTURE.md §Clearing step 5): nodes reserved for a blocked gang, backfill around
them, and the due gang's claim on what ran past its prediction.

A gang of an owed tenant (the fair-share history says it received less than its target) or one that waited
``starve_rounds`` may fit no node: its GPUs are free by count but spread over nodes. Waiting for a node to
empty by chance can take days. So, as Slurm's backfill scheduler does, the gang gets the node(s) that will
drain soonest by the running jobs' expected ends (``Leases.expect_end``: the prediction, bounded by the maximum
runtime) reserved, with the time they are expected to be free: its *expected start*. Reserved nodes are
nominated to the gang: no other gang is placed there, and reclaim never takes them for another.

Reserved nodes need not sit idle: a job predicted to end before the gang is due (``Bids.expect_s``) may start
there (backfill, ``backfill``); it is marked, and if it runs past its prediction it is the first victim when
the gang is due (``claim_due``). A round re-clears to the same result: the expected ends, the backfill marks
and the history are all in the frozen book.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_G, TIER_S, Book
from allocator.reference.placement import Floor, Placed

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]
NEVER = np.iinfo(np.int64).max // 4  # an end nobody knows: such a node never drains in the forecast


def expected_ends(book: Book) -> I64:
    """When each lease is expected to end: ``Leases.expect_end`` where known, else never; an end already past
    (a job running over its prediction) counts as now."""
    ends = book.leases.expect_end
    return np.where(ends < 0, NEVER, np.maximum(ends, book.now)).astype(np.int64)


def frees_by_node(book: Book, gone: BOOL) -> dict[int, list[tuple[int, int]]]:
    """By node: (expected end, GPUs it frees there) of every lease still running on it (not in ``gone``),
    soonest first."""
    ls = book.leases
    ends = expected_ends(book)
    owner = ls.slot_owner
    live = ~gone[owner]
    out: dict[int, list[tuple[int, int]]] = {}
    if not live.any():
        return out
    node, lease = ls.slot_node[live].astype(np.int64), owner[live]
    key = node * (len(ls) + 1) + lease
    uniq, count = np.unique(key, return_counts=True)
    for k, c in zip(uniq.tolist(), count.tolist(), strict=True):
        n, v = divmod(k, len(ls) + 1)
        out.setdefault(n, []).append((int(ends[v]), c))
    for events in out.values():
        events.sort()
    return out


def drain_time(free_now: int, events: list[tuple[int, int]], k: int, now: int) -> int:
    """When a node with ``free_now`` GPUs free and these (end, GPUs) events will have ``k`` free."""
    have, at = free_now, now
    for end, gpus in events:
        if have >= k:
            break
        have, at = have + gpus, end
    return at if have >= k else NEVER


def drain_soonest(
    floor: Floor, book: Book, t: int, k: int, job: int, limit: int, frees: dict[int, list[tuple[int, int]]]
) -> tuple[I64, int]:
    """The nodes to reserve for a gang of ``k`` GPUs (job ``job``) that fits no node now: those of type ``t``
    that will hold it soonest: for a gang of a node or less the one node that has k free first (then the most free now,
    then the lowest index); for a larger gang whole nodes of one domain, the domain whose nodes empty first. At
    most ``limit`` of the type's nodes are reserved at once. Returns the nodes (none: no reservation is possible)
    and the expected start; ``mark_reserved`` makes it so."""
    nodes = floor.nodes
    ix = floor.open_nodes(t)
    ix = ix[~floor.touched[ix]]
    none = ix[:0]
    if ix.size == 0:
        return none, NEVER
    now = int(book.now)
    if k <= floor.max_cap[t]:
        ix = ix[nodes.capacity[ix] >= k]
        if ix.size == 0:
            return none, NEVER
        when = np.array([drain_time(int(floor.free[n]), frees.get(int(n), []), k, now) for n in ix.tolist()])
        best = int(np.lexsort((ix, -floor.free[ix], when))[0])
        chosen, start = ix[[best]], int(when[best])
    else:
        cap = nodes.capacity[ix].astype(np.int64)
        when = np.array(
            [
                drain_time(int(floor.free[n]), frees.get(int(n), []), int(c), now)
                for n, c in zip(ix.tolist(), cap.tolist(), strict=True)
            ]
        )
        dom = nodes.domain[ix]
        best_pick: tuple[int, int, I64] | None = None
        for d in np.unique(dom).tolist():
            members = np.flatnonzero(dom == d)
            members = members[np.lexsort((ix[members], -cap[members], when[members]))]
            need = np.cumsum(cap[members]) - cap[members] < k
            if cap[members].sum() < k:
                continue
            pick = members[need]
            start = int(when[pick].max())
            if best_pick is None or (start, d) < best_pick[:2]:
                best_pick = (start, d, pick)
        if best_pick is None:
            return none, NEVER
        start, chosen = best_pick[0], np.sort(ix[best_pick[2]])
    already = int(floor.reserved[floor.type_nodes[t]].sum())
    if already + chosen.size > limit:
        return none, NEVER
    return chosen, start


def mark_reserved(floor: Floor, nodes: I64, job: int, start: int) -> None:
    """Reserve ``nodes`` for ``job``, expected to start there at ``start``: nominated to it from now on."""
    floor.reserved[nodes] = True
    for node in nodes.tolist():
        floor.reserved_for[node] = job
        floor.reserved_start[node] = start


def backfill(floor: Floor, book: Book, t: int, rows: I64, tiers: NDArray[np.int8]) -> BOOL:
    """Backfill (step 5): bids still unplaced (``rows``, in placement order, with the tier each was selected in,
    -1 none: spot) start on a node reserved for another gang when they are predicted to end before the gang is
    due there (now + ``Bids.expect_s`` at most the node's expected start) and fit it: best fit among such nodes.
    Gangs larger than a node never backfill. A backfilled job must stay preemptible: one selected in tier G
    starts in tier S (at the spot price, which is never above its limit). Returns the placed mask."""
    placed = np.zeros(rows.shape[0], dtype=np.bool_)
    reserved = [n for n in floor.reserved_for if floor.nodes.gpu_type[n] == t]
    if not reserved or rows.size == 0:
        return placed
    nodes = np.array(sorted(reserved), dtype=np.int64)
    start = np.array([floor.reserved_start[int(n)] for n in nodes], dtype=np.int64)
    ends = book.now + book.bids.expect_s[rows]
    k = book.bids.gpus[rows]
    for i in np.flatnonzero((k <= floor.max_cap[t]) & (start.min() < NEVER)).tolist():
        ok = (floor.free[nodes] >= k[i]) & (start >= ends[i])
        if not ok.any():
            continue
        cand = nodes[ok]
        node = int(cand[np.lexsort((cand, floor.free[cand]))[0]])  # best fit
        one = np.array([rows[i]], dtype=np.int64)
        floor.record(one, np.array([node]), np.array([k[i]], dtype=np.int64), one * 0, _tier(tiers[i]), t)
        floor.backfilled.append(int(rows[i]))
        placed[i] = True
    return placed


def _tier(tier: int) -> int:
    return TIER_S if tier < 0 or tier == TIER_G else int(tier)


def due_victims(book: Book, floor: Floor, job: int, gone: BOOL) -> list[int]:
    """The leases a gang may preempt on its own reserved nodes once it is due: only those started by backfill
    that are running past their predicted end (they were let in on that promise) and past the minimum runtime."""
    ls = book.leases
    mine = {n for n, j in floor.reserved_for.items() if j == job}
    if not mine:
        return []
    late = np.flatnonzero(
        ls.backfill
        & ~gone
        & (ls.expect_end >= 0)
        & (ls.expect_end <= book.now)
        & (book.now - ls.start >= book.policy.min_runtime_s)
    )
    out = []
    for v in late.tolist():
        on = set(ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]].tolist())
        if on <= mine:
            out.append(v)
    return out


__all__ = [
    "NEVER",
    "Placed",
    "backfill",
    "due_victims",
    "expected_ends",
    "frees_by_node",
    "drain_soonest",
    "mark_reserved",
]
