"""Consolidation (ARCHITECTURE.md §Clearing step 5, as KAI's Consolidate): move a few running jobs to other nodes
when that makes room at once for a blocked gang of an owed tenant, instead of waiting for nodes to drain.

A move preempts the lease with its grace period and places its job again in the same round on GPUs free
elsewhere, same type, tier and price: nobody loses GPUs by it, guaranteed jobs included. A consolidation is
committed only if every job it moves is placed again (``plan`` returns nothing otherwise). The churn is bounded by
the round policy: at most ``max_moves`` leases per round, only leases older than ``move_min_runtime_s``, none that
would lose more than ``move_max_lost_gpu_s`` GPU-seconds of work since its last checkpoint, no node moved from or
to within ``move_cooldown_s`` of its last move; among the ways to make room, the one that moves the fewest GPUs,
then loses the least work, wins (``cost``), and it is carried out only when cheaper than waiting for the nodes
that drain soonest (``cheaper``). Leases spanning several nodes are never moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from allocator.book import Book
from allocator.reference.placement import Floor, Placed
from allocator.reference.reclaim import Preempting

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


@dataclass
class Plan:
    """A way to make room for a gang: the nodes it will take, the leases to move (lease row -> new node) and
    its cost (GPUs moved, work lost)."""

    nodes: list[int]
    moves: dict[int, int]
    cost: tuple[int, int]


@dataclass
class Moved:
    """The moves of a round, in order: lease row, its new node and slots."""

    rows: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    slots: list[I64] = field(default_factory=list)


def movable(book: Book, p: Preempting, t: int, claimant: int) -> BOOL:
    """Leases of type ``t`` that may be moved: on one node, not preempted, not the claimant's, past the minimum
    runtime for moves, losing at most the policy's GPU-seconds (``Leases.lost_gpu_s``)."""
    ls, policy = book.leases, book.policy
    nodes_per = np.zeros(len(ls), dtype=np.int64)
    if len(ls):
        first = ls.slot_node[ls.slot_ptr[:-1]]
        same = ls.slot_node == np.repeat(first, ls.gpus)
        nodes_per = np.add.reduceat((~same).astype(np.int64), ls.slot_ptr[:-1])
    return np.asarray(
        (ls.gpu_type == t)
        & ~p.preempted
        & (ls.tenant != claimant)
        & (nodes_per == 0)
        & (book.now - ls.start >= policy.move_min_runtime_s)
        & (ls.lost_gpu_s(int(book.now)) <= policy.move_max_lost_gpu_s),
        dtype=np.bool_,
    )


def cooled(book: Book, floor: Floor, nodes: I64) -> BOOL:
    """Nodes whose last move is at least ``move_cooldown_s`` ago (or never)."""
    last = book.nodes.moved_at[nodes]
    return np.asarray((last < 0) | (book.now - last >= book.policy.move_cooldown_s), dtype=np.bool_)


def leases_on(book: Book, p: Preempting, t: int) -> dict[int, list[int]]:
    """Lease rows of type ``t`` still running on each node (a lease on several nodes is listed on each)."""
    ls = book.leases
    out: dict[int, list[int]] = {}
    for v in np.flatnonzero(~p.preempted & (ls.gpu_type == t)).tolist():
        for node in np.unique(ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]]).tolist():
            out.setdefault(int(node), []).append(v)
    return out


def rehome(sizes: list[tuple[int, int]], free: dict[int, int]) -> dict[int, int] | None:
    """Place leases (row, GPUs), largest first, each on the fullest node that holds it (best fit) among
    ``free`` (node -> free GPUs, changed in place). Returns lease row -> node, or None when one does not fit."""
    out: dict[int, int] = {}
    for row, g in sorted(sizes, key=lambda x: (-x[1], x[0])):
        fits = [(f, n) for n, f in free.items() if f >= g]
        if not fits:
            return None
        _, node = min(fits)
        free[node] -= g
        out[row] = node
    return out


def plan(
    book: Book, floor: Floor, p: Preempting, t: int, k: int, claimant: int, job: int, budget: int
) -> Plan | None:
    """The cheapest way to make room at once for a gang of ``k`` GPUs of ``claimant`` (job ``job``) by moving at
    most ``budget`` leases: for a gang of a node or less one node, else whole nodes of one domain. None when no
    way exists within the policy."""
    ls = book.leases
    ok = movable(book, p, t, claimant)
    on = leases_on(book, p, t)
    open_ = floor.open_nodes(t)
    mine = np.array([n for n, j in floor.reserved_for.items() if j == job and book.nodes.gpu_type[n] == t])
    cand = np.union1d(open_, mine).astype(np.int64)
    cand = cand[cooled(book, floor, cand)]
    targets = open_[cooled(book, floor, open_)] if open_.size else open_
    lost = ls.lost_gpu_s(int(book.now))
    if k <= floor.max_cap[t]:
        options = []
        for n in cand[book.nodes.capacity[cand] >= k].tolist():
            need = k - int(floor.free[n])
            if need <= 0:
                continue
            here = on.get(n, [])
            if any(not ok[v] for v in here) and sum(int(ls.gpus[v]) for v in here if ok[v]) < need:
                continue
            pick, have = [], 0
            for v in sorted((v for v in here if ok[v]), key=lambda v: (int(lost[v]), -int(ls.gpus[v]), v)):
                if have >= need:
                    break
                pick.append(v)
                have += int(ls.gpus[v])
            if have < need or len(pick) > budget:
                continue
            options.append((sum(int(ls.gpus[v]) for v in pick), int(lost[pick].sum()), n, pick))
        for moved_gpus, lost_s, n, pick in sorted(options):
            free = {int(m): int(floor.free[m]) for m in targets.tolist() if m != n}
            where = rehome([(v, int(ls.gpus[v])) for v in pick], free)
            if where is not None:
                return Plan([n], where, (moved_gpus, lost_s))
        return None
    return _plan_whole(book, floor, ls, ok, on, cand, targets, lost, k, budget)


def _plan_whole(
    book: Book,
    floor: Floor,
    ls: object,
    ok: BOOL,
    on: dict[int, list[int]],
    cand: I64,
    targets: I64,
    lost: I64,
    k: int,
    budget: int,
) -> Plan | None:
    """Whole nodes of one domain for a gang larger than a node: each node whose leases may all move, cheapest
    first (GPUs to move, then work lost, then index), until the domain's chosen nodes hold the gang; the
    domain whose plan costs least wins."""
    leases = book.leases
    nodes = book.nodes
    per: dict[int, list[tuple[int, int, int, list[int]]]] = {}
    for n in cand.tolist():
        here = on.get(n, [])
        if any(not ok[v] for v in here):
            continue
        gpus = sum(int(leases.gpus[v]) for v in here)
        if int(floor.free[n]) + gpus != int(nodes.capacity[n]):
            continue  # something placed this round holds GPUs there
        per.setdefault(int(nodes.domain[n]), []).append((gpus, int(lost[here].sum()) if here else 0, n, here))
    best: Plan | None = None
    for d in sorted(per):
        chosen, have, rows = [], 0, []
        for gpus, lost_s, n, here in sorted(per[d]):
            if have >= k:
                break
            chosen.append((gpus, lost_s, n))
            rows += here
            have += int(nodes.capacity[n])
        if have < k or len(rows) > budget:
            continue
        taken = {n for _, _, n in chosen}
        free = {int(m): int(floor.free[m]) for m in targets.tolist() if m not in taken}
        where = rehome([(v, int(leases.gpus[v])) for v in rows], free)
        if where is None:
            continue
        cost = (sum(g for g, _, _ in chosen), sum(x for _, x, _ in chosen))
        if best is None or cost < best.cost:
            best = Plan(sorted(taken), where, cost)
    return best


def cheaper(book: Book, plan_: Plan, wait_cost: int) -> bool:
    """Moving is cheaper than waiting (KAI moves only then too): the GPU-seconds the moves cost (each moved GPU
    restarting for ``move_restart_s``, plus the work lost since the leases' checkpoints) are fewer than the
    gang's GPUs waiting for its reserved nodes to drain (``wait_cost``; unknown ends: never drain)."""
    moved_gpus, lost_s = plan_.cost
    return moved_gpus * book.policy.move_restart_s + lost_s < wait_cost


def apply(
    book: Book,
    floor: Floor,
    p: Preempting,
    t: int,
    gang: tuple[int, int, int],
    plan_: Plan,
    tier: int,
    moved: Moved,
) -> None:
    """Carry out a plan: each moved lease is preempted (reason ``MOVED``, for the gang's job) and takes its new
    node's next free slots; its tenant keeps holding the GPUs. Then the gang takes the freed nodes: their free
    slots not yet handed out, then the GPUs its moves freed there."""
    from allocator.result import MOVED

    row, k, job = gang
    ls, nodes = book.leases, floor.nodes
    for v, dest in sorted(plan_.moves.items()):
        g = int(ls.gpus[v])
        skip = int(floor.initial_free[dest] - floor.free[dest])
        moved.rows.append(v)
        moved.nodes.append(dest)
        moved.slots.append(np.flatnonzero(nodes.free[dest])[skip : skip + g].astype(np.int64))
        floor.free[dest] -= g
        floor.touched[dest] = True
        p.preempted[v] = True
        p.preempted_for[v] = job
        p.preempt_reason[v] = MOVED
    counts, slots, left = [], [], k
    for n in plan_.nodes:
        take = min(int(nodes.capacity[n]), left)
        left -= take
        from_free = min(int(floor.free[n]), take)
        skip = int(floor.initial_free[n] - floor.free[n])
        free_now = np.flatnonzero(nodes.free[n])[skip : skip + from_free]
        freed = [
            int(s)
            for v in plan_.moves
            for node, s in zip(
                ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]].tolist(),
                ls.slot_idx[ls.slot_ptr[v] : ls.slot_ptr[v + 1]].tolist(),
                strict=True,
            )
            if node == n
        ]
        counts.append(take)
        slots.append(np.concatenate([free_now, np.sort(np.array(freed, dtype=np.int64))[: take - from_free]]))
        floor.free[n] -= from_free
        floor.touched[n] = True
    if len(plan_.nodes) > 1:
        floor.spread = True
    m = len(plan_.nodes)
    floor.batches.append(
        Placed(
            np.full(m, row, dtype=np.int64),
            np.array(plan_.nodes, dtype=np.int64),
            np.array(counts, dtype=np.int64),
            np.zeros(m, dtype=np.int64),
            tier,
            t,
            np.concatenate(slots).astype(np.int64),
        )
    )
