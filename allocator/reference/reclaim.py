"""Re-tiering (ARCHITECTURE.md §Clearing step 2) and reclaim by preemption (step 6): for a guarantee, and fair
reclaim for an entitlement. Both preempt the same way (``preempt_gang``: one node, or whole nodes for a gang
larger than a node); they differ in who may claim and which victims they may take (``may_take``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_G, TIER_S, Book
from allocator.reference.fill import first_fit
from allocator.reference.placement import Floor, Placed

I64 = NDArray[np.int64]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]


def retier(book: Book, held: I64, lease_tier: I8) -> I64:
    """Re-tiering (step 2): by (tenant, type), the leases not in tier G, oldest first (start, then lease id), are
    first-fit into what the tenant's guarantee lacks in tier G; those that fit become tier G and stop being
    preemptible (``held`` by tenant, tier, type and ``lease_tier`` change in place). Returns their lease ids."""
    ls = book.leases
    cand = np.flatnonzero((lease_tier != TIER_G) & ~ls.backfill)  # backfill stays preemptible (reserve.py)
    cand = cand[np.lexsort((ls.lease[cand], ls.start[cand], ls.gpu_type[cand], ls.tenant[cand]))]
    n_types = held.shape[2]
    gap = np.maximum(book.tenants.guarantee - held[:, TIER_G, :], 0).astype(np.int64).ravel()
    seg = ls.tenant[cand].astype(np.int64) * n_types + ls.gpu_type[cand]
    moved = cand[first_fit(ls.gpus[cand], gap, seg)]
    for v in moved.tolist():
        m, t, k = int(ls.tenant[v]), int(ls.gpu_type[v]), int(ls.gpus[v])
        held[m, lease_tier[v], t] -= k
        held[m, TIER_G, t] += k
        lease_tier[v] = TIER_G
    return np.sort(ls.lease[moved])


@dataclass
class Preempting:
    """What reclaim reads and changes: lease tiers and who was preempted for which job, GPUs held by (tenant,
    tier, type) less the preempted ones."""

    book: Book
    lease_tier: I8
    preempted: BOOL
    preempted_for: I64
    preempt_reason: I64
    held: I64
    gpus: I64  # by lease


def victim_order(p: Preempting, t: int, above: NDArray[np.float64]) -> list[int]:
    """Who may be preempted in type ``t``, in order: tier S leases, then tier B, each by its tenant's distance
    above its entitlement (``above``, by tenant) desc, then the least work lost first (GPU-seconds since the
    lease's last checkpoint, ``Leases.lost_gpu_s``: with no checkpoint reported, the youngest and smallest),
    then youngest first, then lease id; never tier G (nor re-tiered to G), never a non-preemptible lease, never one younger than the
    minimum runtime."""
    ls, book = p.book.leases, p.book
    ok = (
        ~p.preempted
        & (ls.gpu_type == t)
        & ls.preemptible
        & (p.lease_tier != TIER_G)
        & (book.now - ls.start >= book.policy.min_runtime_s)
    )
    rows = np.flatnonzero(ok)
    lost = ls.lost_gpu_s(int(book.now))[rows]
    key = (p.lease_tier[rows] != TIER_S, -above[ls.tenant[rows]], lost, -ls.start[rows], ls.lease[rows])
    return [int(v) for v in rows[np.lexsort(key[::-1])]]


def preempt_for(
    p: Preempting,
    floor: Floor,
    t: int,
    gang: tuple[int, int, int, int],
    order: list[int],
    may_take: Callable[[int, int], bool],
    reason: int,
    tier: int,
) -> bool:
    """Make room for one gang (bid row, GPUs k, tenant, job) on one node of type ``t`` by preempting victims in
    ``order`` that ``may_take(lease row, GPUs of it taken from its tenant so far)`` allows, and place it there.
    The node is the cheapest: fewest victim GPUs that must go there, then node index; a node reserved for
    another starving gang is never used. The gang takes the node's free slots first, then the lowest of the
    slots its victims free. Returns whether it was placed."""
    row, k, claimant, job = gang
    ls = p.book.leases
    if k > floor.max_cap[t]:
        return False
    on: dict[int, dict[int, int]] = {}  # node -> victim lease row -> its GPUs there
    for v in order:
        if p.preempted[v] or ls.tenant[v] == claimant:
            continue
        for s in range(int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1])):
            node = int(ls.slot_node[s])
            on.setdefault(node, {})
            on[node][v] = on[node].get(v, 0) + 1
    screen = []
    for node, victims in on.items():
        need = max(1, k - int(floor.free[node]))
        if sum(victims.values()) >= need and floor.reserved_for.get(node, job) == job:
            screen.append((need, node))
    for _, node in sorted(screen):
        chosen, have, taken = [], int(floor.free[node]), dict[int, int]()
        for v in order:
            if have >= k:
                break
            if v not in on[node]:
                continue
            m = int(ls.tenant[v])
            if not may_take(v, taken.get(m, 0)):
                continue
            taken[m] = taken.get(m, 0) + int(p.gpus[v])
            chosen.append(v)
            have += on[node][v]
        if have >= k:
            place_on_freed(p, floor, t, node, (row, k, job), chosen, reason, tier)
            return True
    return False


def place_on_freed(
    p: Preempting,
    floor: Floor,
    t: int,
    node: int,
    gang: tuple[int, int, int],
    chosen: list[int],
    reason: int,
    tier: int,
) -> None:
    """Preempt ``chosen`` and place the gang on ``node``: its free slots not yet handed out, then freed ones."""
    row, k, job = gang
    ls = p.book.leases
    from_free = min(int(floor.free[node]), k)
    skip = int(floor.initial_free[node] - floor.free[node])
    free_now = np.flatnonzero(floor.nodes.free[node])[skip : skip + from_free]
    freed = []
    for v in chosen:
        a, b = int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1])
        freed += [int(s) for n, s in zip(ls.slot_node[a:b], ls.slot_idx[a:b], strict=True) if n == node]
        p.preempted[v] = True
        p.preempted_for[v] = job
        p.preempt_reason[v] = reason
        p.held[ls.tenant[v], p.lease_tier[v], t] -= b - a
    slots = np.concatenate([free_now, np.sort(np.array(freed, dtype=np.int64))[: k - from_free]])
    floor.free[node] -= from_free
    floor.touched[node] = True
    one = np.array([row], dtype=np.int64)
    floor.batches.append(
        Placed(one, np.array([node], dtype=np.int64), np.array([k], dtype=np.int64), one * 0, tier, t, slots)
    )


def preempt_gang(
    p: Preempting,
    floor: Floor,
    t: int,
    gang: tuple[int, int, int, int],
    order: list[int],
    may_take: Callable[[int, int], bool],
    reason: int,
    tier: int,
) -> bool:
    """Where reclaim, for a guarantee or fair, makes room for a gang (bid row, GPUs k, tenant, job) as
    placement would put it: on one node when it fits one (``preempt_for``), else on whole nodes of one domain
    (``preempt_whole_nodes``). Returns whether it was placed."""
    preempt = preempt_for if gang[1] <= floor.max_cap[t] else preempt_whole_nodes
    return preempt(p, floor, t, gang, order, may_take, reason, tier)


def preempt_whole_nodes(
    p: Preempting,
    floor: Floor,
    t: int,
    gang: tuple[int, int, int, int],
    order: list[int],
    may_take: Callable[[int, int], bool],
    reason: int,
    tier: int,
) -> bool:
    """Make room for a gang larger than any node of type ``t`` on whole nodes of one topology domain, as
    placement puts such a gang: nodes that are whole once their victims go (``whole_node_victims``), chosen in
    each domain by ``cheapest_nodes``; of the domains where they hold the gang, the one where the fewest victim
    GPUs must go (then the first). Each victim is preempted once, however many chosen nodes it runs on (its GPUs
    on nodes not chosen stay idle this round). Returns whether the gang was placed."""
    row, k, claimant, job = gang
    ls, nodes = p.book.leases, floor.nodes
    best: tuple[int, dict[int, list[int]]] | None = None
    for cands in whole_node_victims(p, floor, t, claimant, job, set(order)).values():
        pick = cheapest_nodes(p, floor, cands, k, may_take)
        if pick is not None and (best is None or pick[0] < best[0]):
            best = pick
    if best is None:
        return False
    chosen = best[1]
    for v in sorted({v for victims in chosen.values() for v in victims}):
        p.preempted[v] = True
        p.preempted_for[v] = job
        p.preempt_reason[v] = reason
        p.held[ls.tenant[v], p.lease_tier[v], t] -= int(p.gpus[v])
    node_ids, counts, slots, left = sorted(chosen), [], [], k
    for node in node_ids:
        freed = []
        for v in chosen[node]:
            a, b = int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1])
            freed += [int(x) for n, x in zip(ls.slot_node[a:b], ls.slot_idx[a:b], strict=True) if n == node]
        take = min(int(nodes.capacity[node]), left)
        left -= take
        # as placement hands out a node's free slots: the next ones not yet handed out, then the freed ones
        from_free = min(int(floor.free[node]), take)
        skip = int(floor.initial_free[node] - floor.free[node])
        free_now = np.flatnonzero(nodes.free[node])[skip : skip + from_free]
        counts.append(take)
        slots.append(np.concatenate([free_now, np.sort(np.array(freed, dtype=np.int64))[: take - from_free]]))
        floor.free[node] -= from_free
        floor.touched[node] = True
    n = len(node_ids)
    floor.spread = True
    floor.batches.append(
        Placed(
            np.full(n, row, dtype=np.int64),
            np.array(node_ids, dtype=np.int64),
            np.array(counts, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            tier,
            t,
            np.concatenate(slots),
        )
    )
    return True


def whole_node_victims(
    p: Preempting, floor: Floor, t: int, claimant: int, job: int, eligible: set[int]
) -> dict[int, dict[int, list[int]]]:
    """By domain, then node: the nodes of type ``t`` open to the gang (or reserved for it) where everything
    running is an ``eligible`` victim of another tenant and nothing was placed this round, so the node is whole
    once they go; each with those victims (none: a whole free node)."""
    ls, nodes = p.book.leases, floor.nodes
    running: dict[int, list[int]] = {}  # node -> leases not preempted with a GPU there, by lease row
    for v in np.flatnonzero(~p.preempted & (ls.gpu_type == t)).tolist():
        for node in np.unique(ls.slot_node[int(ls.slot_ptr[v]) : int(ls.slot_ptr[v + 1])]).tolist():
            running.setdefault(node, []).append(v)
    out: dict[int, dict[int, list[int]]] = {}
    for node in floor.open_nodes(t).tolist() + [n for n, j in floor.reserved_for.items() if j == job]:
        if nodes.gpu_type[node] != t:
            continue
        victims = running.get(node, [])
        if any(v not in eligible or ls.tenant[v] == claimant for v in victims):
            continue
        held_there = sum(
            int((ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]] == node).sum()) for v in victims
        )
        if int(floor.free[node]) + held_there != nodes.capacity[node]:
            continue  # something else holds GPUs there (placed this round)
        out.setdefault(int(nodes.domain[node]), {})[node] = victims
    return out


def cheapest_nodes(
    p: Preempting, floor: Floor, cands: dict[int, list[int]], k: int, may_take: Callable[[int, int], bool]
) -> tuple[int, dict[int, list[int]]] | None:
    """Nodes of one domain (``cands``: node -> its victims) for a gang of ``k`` GPUs, one at a time: the node
    where the fewest victim GPUs not already chosen must go (a lease on several nodes counts once), then the
    lowest index. A node is passed over when ``may_take`` refuses one of its victims given all that its tenant
    gives up on the nodes chosen so far, so the rule holds for a tenant's whole loss (refused once, always
    refused: the loss only grows). Returns (victim GPUs, node -> victims) when the nodes hold the gang."""
    ls, cap = p.book.leases, floor.nodes.capacity
    left = dict(cands)
    chosen: dict[int, list[int]] = {}
    gone: set[int] = set()
    taken: dict[int, int] = {}  # victim tenant -> GPUs it gives up
    have = spent = 0
    while have < k and left:
        fresh = {n: [v for v in vs if v not in gone] for n, vs in left.items()}
        cost, node = min((sum(int(p.gpus[v]) for v in vs), n) for n, vs in fresh.items())
        del left[node]
        after = dict(taken)
        for v in fresh[node]:
            m = int(ls.tenant[v])
            if not may_take(v, after.get(m, 0)):
                break
            after[m] = after.get(m, 0) + int(p.gpus[v])
        else:
            taken, chosen[node] = after, cands[node]
            gone.update(fresh[node])
            have += int(cap[node])
            spent += cost
    return (spent, chosen) if have >= k else None
