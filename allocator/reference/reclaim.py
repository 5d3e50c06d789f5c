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
