"""Re-tiering (ARCHITECTURE.md §Clearing step 2) and reclaim by preemption (step 6)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.segments import first_fit
from allocator.state import RoundState

I64 = NDArray[np.int64]


def retier(state: RoundState) -> None:
    """Re-tiering, ARCHITECTURE.md §Clearing step 2: while a tenant holds fewer tier-G GPUs than its guarantee,
    its borrowed and spot leases (oldest first, whole leases, first-fit) become tier G and stop being
    preemptible, so a tenant's leases within its guarantee are always tier G."""
    ls, tenants = state.book.leases, state.book.tenants
    cand = np.flatnonzero(ls.tier != TIER_G)
    if cand.size == 0:
        return
    n_types = len(state.book.types)
    seg = ls.tenant[cand].astype(np.int64) * n_types + ls.gpu_type[cand]
    cand = cand[np.lexsort((ls.lease[cand], ls.start[cand], seg))]
    seg = ls.tenant[cand].astype(np.int64) * n_types + ls.gpu_type[cand]
    gap = np.maximum(tenants.guarantee - state.held[:, TIER_G, :], 0).reshape(-1)
    take = cand[first_fit(seg, ls.gpus[cand], gap)]
    np.subtract.at(state.held, (ls.tenant[take], ls.tier[take], ls.gpu_type[take]), ls.gpus[take])
    np.add.at(state.held, (ls.tenant[take], np.full(take.size, TIER_G), ls.gpu_type[take]), ls.gpus[take])
    state.lease_tier[take] = TIER_G
    state.retiered = np.sort(ls.lease[take])


def victim_order(state: RoundState, t: int, claimant: int) -> I64:
    """Who may be preempted for a guarantee, ARCHITECTURE.md §Clearing step 6, in order: tier S leases, then
    tier B leases of the tenant furthest above its entitlement; never tier G, never a non-preemptible lease,
    never one younger than the minimum runtime (youngest first otherwise, then lease id)."""
    ls, book = state.book.leases, state.book
    ok = (~state.preempted) & (ls.gpu_type == t) & ls.preemptible & (ls.tenant != claimant)
    ok &= (state.lease_tier == TIER_S) | (state.lease_tier == TIER_B)
    ok &= book.now - ls.start >= book.policy.min_runtime_s
    rows = np.flatnonzero(ok)
    above = state.held[ls.tenant[rows], TIER_B, t] - state.share[ls.tenant[rows], t]
    tier_rank = np.where(state.lease_tier[rows] == TIER_S, 0, 1)
    return rows[np.lexsort((ls.lease[rows], -ls.start[rows], -above, tier_rank))]


def _plan_node(state: RoundState, t: int, node: int, k: int, victims: I64) -> tuple[int, list[int]] | None:
    """Greedy victims on one node: (GPUs preempted, lease rows), or None when the gang still cannot fit."""
    ls, q = state.book.leases, state.book.tenants.guarantee
    have = int(state.floor.free[node])
    total = state.held[:, :, t].sum(
        axis=1
    )  # held before this round, less earlier preemptions; wins not counted
    taken: dict[int, int] = {}
    chosen: list[int] = []
    cost = 0
    for v in victims.tolist():
        if have >= k:
            break
        on_node = int((ls.slot_node[ls.slot_ptr[v] : ls.slot_ptr[v + 1]] == node).sum())
        m, g = int(ls.tenant[v]), int(ls.gpus[v])
        if on_node == 0 or total[m] - taken.get(m, 0) - g < q[m, t]:
            continue  # never below the victim's own guarantee
        taken[m] = taken.get(m, 0) + g
        chosen.append(v)
        have += on_node
        cost += g
    return (cost, chosen) if have >= k else None


def reclaim_for(state: RoundState, t: int, row: int) -> bool:
    """Reclaim, ARCHITECTURE.md §Clearing step 6: preempt the cheapest set of eligible victims that lets the
    gang ``row`` (within its tenant's guarantee) fit on one node; place it there. False when impossible."""
    bids, ls, floor = state.book.bids, state.book.leases, state.floor
    k, m = int(bids.gpus[row]), int(bids.tenant[row])
    if k > floor.max_cap[t]:
        return False  # whole-node gangs are not restored by preemption; counted by the caller
    victims = victim_order(state, t, m)
    if victims.size == 0:
        return False
    nodes = np.unique(
        ls.slot_node[np.concatenate([np.arange(ls.slot_ptr[v], ls.slot_ptr[v + 1]) for v in victims])]
    )
    best: tuple[int, int, list[int]] | None = None
    for node in nodes[~floor.reserved[nodes]].tolist():
        plan = _plan_node(state, t, node, k, victims)
        if plan is not None and (best is None or plan[0] < best[0]):
            best = (plan[0], node, plan[1])
    if best is None:
        return False
    _, node, chosen = best
    extra = []
    for v in chosen:
        state.preempted[v] = True
        state.preempted_for[v] = int(bids.job[row])
        state.held[ls.tenant[v], state.lease_tier[v], t] -= ls.gpus[v]
        span = slice(ls.slot_ptr[v], ls.slot_ptr[v + 1])
        extra.append(np.sort(ls.slot_idx[span][ls.slot_node[span] == node]))
    from_free = min(int(floor.free[node]), k)
    floor.take_explicit(
        row, node, from_free, np.sort(np.concatenate(extra))[: k - from_free].astype(np.int64)
    )
    return True
