"""Re-tiering (ARCHITECTURE.md §Clearing step 2) and reclaim by preemption (step 6): for a guarantee, and fair
reclaim for an entitlement. Both preempt the same way (``preempt_for``); they differ in who may claim and which
victims they may take (``may_take``)."""

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
    cand = np.flatnonzero(lease_tier != TIER_G)
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
    above its entitlement (``above``, by tenant) desc, then youngest first, then lease id; never tier G (nor
    re-tiered to G), never a non-preemptible lease, never one younger than the minimum runtime."""
    ls, book = p.book.leases, p.book
    ok = (
        ~p.preempted
        & (ls.gpu_type == t)
        & ls.preemptible
        & (p.lease_tier != TIER_G)
        & (book.now - ls.start >= book.policy.min_runtime_s)
    )
    rows = np.flatnonzero(ok)
    key = (p.lease_tier[rows] != TIER_S, -above[ls.tenant[rows]], -ls.start[rows], ls.lease[rows])
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
    placement puts such a gang: a node qualifies when everything running on it is a victim in ``order`` that
    ``may_take`` allows (then it is whole once they go); of the domains whose qualifying nodes hold the gang,
    the one where the fewest victim GPUs must go, its cheapest nodes first (then node index). Returns whether
    the gang was placed."""
    row, k, claimant, job = gang
    ls, nodes = p.book.leases, floor.nodes
    eligible = set(order)
    running: dict[int, set[int]] = {}  # node of type t -> leases not preempted with a GPU there
    for v in range(len(ls)):
        if p.preempted[v] or ls.gpu_type[v] != t:
            continue
        for node in ls.slot_node[int(ls.slot_ptr[v]) : int(ls.slot_ptr[v + 1])].tolist():
            running.setdefault(int(node), set()).add(v)
    by_domain: dict[int, list[tuple[int, int, list[int]]]] = {}
    for node in floor.open_nodes(t).tolist() + [n for n, j in floor.reserved_for.items() if j == job]:
        if nodes.gpu_type[node] != t:
            continue
        victims = sorted(running.get(node, set()))
        if any(v not in eligible or ls.tenant[v] == claimant for v in victims):
            continue
        cost = sum(int(p.gpus[v]) for v in victims)
        if (
            int(floor.free[node])
            + sum((ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]] == node).sum() for v in victims)
            != nodes.capacity[node]
        ):
            continue  # something else holds GPUs there (placed this round)
        by_domain.setdefault(int(nodes.domain[node]), []).append((cost, node, victims))
    best: tuple[int, list[tuple[int, int, list[int]]]] | None = None
    for cands in by_domain.values():
        chosen, have, spent, taken = [], 0, 0, dict[int, int]()
        for cost, node, victims in sorted(cands):
            if have >= k:
                break
            if not all(may_take(v, taken.get(int(ls.tenant[v]), 0)) for v in victims):
                continue
            for v in victims:
                taken[int(ls.tenant[v])] = taken.get(int(ls.tenant[v]), 0) + int(p.gpus[v])
            chosen.append((cost, node, victims))
            have += int(nodes.capacity[node])
            spent += cost
        if have >= k and (best is None or spent < best[0]):
            best = (spent, chosen)
    if best is None:
        return False
    chosen = sorted(best[1], key=lambda c: c[1])
    node_ids, counts, slots, left = [], [], [], k
    for _, node, victims in chosen:
        freed = []
        for v in victims:
            a, b = int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1])
            freed += [int(x) for n, x in zip(ls.slot_node[a:b], ls.slot_idx[a:b], strict=True) if n == node]
            p.preempted[v] = True
            p.preempted_for[v] = job
            p.preempt_reason[v] = reason
            p.held[ls.tenant[v], p.lease_tier[v], t] -= int(p.gpus[v])
        take = min(int(nodes.capacity[node]), left)
        left -= take
        # as placement hands out a node's free slots: the next ones not yet handed out, then the freed ones
        from_free = min(int(floor.free[node]), take)
        skip = int(floor.initial_free[node] - floor.free[node])
        free_now = np.flatnonzero(nodes.free[node])[skip : skip + from_free]
        node_ids.append(node)
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
