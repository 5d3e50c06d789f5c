"""Re-tiering (ARCHITECTURE.md §Clearing step 2) and reclaim by preemption (step 6)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.kernels import first_fit, move_held
from allocator.segments import segment_starts
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
    seg = (ls.tenant[cand].astype(np.int64) * n_types + ls.gpu_type[cand]).astype(np.int32)
    gap = np.maximum(tenants.guarantee - state.held[:, TIER_G, :], 0).reshape(-1)
    tier = np.full(cand.shape[0], -1, dtype=np.int8)
    first_fit(tier, TIER_G, cand.shape[0], seg, ls.gpus[cand].astype(np.int32), gap)
    take = np.compress(tier == TIER_G, cand)
    move_held(state.held, take, ls.tenant, ls.tier, ls.gpu_type, ls.gpus, TIER_G)
    state.lease_tier[take] = TIER_G
    state.retiered = np.sort(ls.lease[take])


def victim_order(state: RoundState, t: int, claimant: int) -> I64:
    """Who may be preempted for a guarantee, ARCHITECTURE.md §Clearing step 6, in order: tier S leases, then
    tier B leases of the tenant furthest above its entitlement; never tier G, never a non-preemptible lease,
    never one younger than the minimum runtime (youngest first otherwise, then lease id); never the claimant's."""
    if t not in state.victim_cache:
        state.victim_cache[t] = _victims(state, t)
    rows = state.victim_cache[t]
    out: I64 = rows[state.book.leases.tenant[rows] != claimant]
    return out


def _victims(state: RoundState, t: int) -> I64:
    ls, book = state.book.leases, state.book
    ok = (~state.preempted) & (ls.gpu_type == t) & ls.preemptible
    ok &= (state.lease_tier == TIER_S) | (state.lease_tier == TIER_B)
    ok &= book.now - ls.start >= book.policy.min_runtime_s
    rows = np.flatnonzero(ok)
    above = state.held[ls.tenant[rows], TIER_B, t] - state.share[ls.tenant[rows], t]
    tier_rank = np.where(state.lease_tier[rows] == TIER_S, 0, 1)
    return rows[np.lexsort((ls.lease[rows], -ls.start[rows], -above, tier_rank))]


def _plan_node(state: RoundState, t: int, node: int, k: int, victims: I64) -> tuple[int, list[int]] | None:
    """Greedy victims on one node, in victim order: (GPUs preempted, lease rows), or None when the gang still
    cannot fit. A victim is skipped when taking it would leave its tenant below its own guarantee."""
    ls, q = state.book.leases, state.book.tenants.guarantee
    have = int(state.floor.free[node])
    taken: dict[int, int] = {}
    chosen: list[int] = []
    cost = 0
    for v in victims.tolist():
        if have >= k:
            break
        span = slice(int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1]))
        on_node = int((ls.slot_node[span] == node).sum())
        m, g = int(ls.tenant[v]), span.stop - span.start
        if on_node == 0 or int(state.held[m, :, t].sum()) - taken.get(m, 0) - g < q[m, t]:
            continue  # held counts what the tenant had before the round, less earlier preemptions
        taken[m] = taken.get(m, 0) + g
        chosen.append(v)
        have += on_node
        cost += g
    return (cost, chosen) if have >= k else None


def _candidate_nodes(state: RoundState, k: int, victims: I64) -> I64:
    """Nodes where preempting victims (in order) could make room for a gang of k, cheapest first (GPUs freed
    on the node until it fits, then node index); a screen for ``_plan_node``."""
    ls, floor = state.book.leases, state.floor
    counts = ls.slot_ptr[victims + 1] - ls.slot_ptr[victims]
    starts = np.repeat(ls.slot_ptr[victims] - (np.cumsum(counts) - counts), counts)
    node = ls.slot_node[starts + np.arange(starts.shape[0])].astype(np.int64)
    key = node << 32  # by node, victims still in order: one sort of packed (node, position) keys
    key |= np.arange(node.shape[0])
    key.sort()
    node = key >> 32
    first = np.flatnonzero(segment_starts(node))
    freed = np.arange(1, node.shape[0] + 1) - np.repeat(first, np.diff(np.append(first, node.shape[0])))
    enough = (freed + floor.free[node] >= k) & ~floor.reserved[node]
    at = np.flatnonzero(enough & segment_starts(np.where(enough, node, -1 - node)))
    return node[at[np.lexsort((node[at], freed[at]))]]


def reclaim_for(state: RoundState, t: int, row: int) -> bool:
    """Reclaim, ARCHITECTURE.md §Clearing step 6: preempt the cheapest set of eligible victims that lets the
    gang ``row`` (within its tenant's guarantee) fit on one node; place it there. False when impossible."""
    bids, ls, floor = state.book.bids, state.book.leases, state.floor
    k, m = int(bids.gpus[row]), int(bids.tenant[row])
    if k > floor.max_cap[t] or state.reclaim_failed.get((m, t), k + 1) <= k:
        return False  # whole-node gangs are not restored by preemption; a failure stays a failure this round
    victims = victim_order(state, t, m)
    best: tuple[int, list[int]] | None = None
    for node in _candidate_nodes(state, k, victims).tolist() if victims.size else []:
        on_node = victims[np.isin(victims, state.leases_on(node))]
        plan = _plan_node(state, t, node, k, on_node)
        if plan is not None:
            best = (node, plan[1])
            break
    if best is None:
        state.reclaim_failed[(m, t)] = min(k, state.reclaim_failed.get((m, t), k))
        return False
    node, chosen = best
    if (state.lease_tier[chosen] == TIER_S).all() and t in state.victim_cache:
        # held changes only in tier S, which the order does not read: the order stands, less the chosen
        order = state.victim_cache[t]
        state.victim_cache[t] = order[~np.isin(order, chosen)]
    else:
        state.victim_cache.clear()  # tier-B holdings (the order's "above") change below
    extra = []
    for v in chosen:
        span = slice(int(ls.slot_ptr[v]), int(ls.slot_ptr[v + 1]))
        state.preempted[v] = True
        state.preempted_for[v] = int(bids.job[row])
        state.held[ls.tenant[v], state.lease_tier[v], t] -= span.stop - span.start
        extra.append(np.sort(ls.slot_idx[span][ls.slot_node[span] == node]))
    from_free = min(int(floor.free[node]), k)
    floor.take_explicit(
        row, node, from_free, np.sort(np.concatenate(extra))[: k - from_free].astype(np.int64)
    )
    return True
