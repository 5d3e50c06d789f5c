"""Reclaim by preemption (ARCHITECTURE.md §Clearing step 6) as one compiled loop (``allocator.jit``): the
unplaced tier-G gangs of a type, in turn, each preempting what lets it fit on one node.

Why one compiled loop: each gang's choice depends on every earlier one (leases preempted, holdings, free
GPUs), so the rule is sequential. Stated gang by gang in numpy it cost some fifty calls a gang (the victim
order, a screen of nodes, a greedy plan per node); the three-type benchmark book at 10^4 bids has about 130
such gangs a round, and they took half of it.

Arrays are indexed by lease row (``leases``: tenant, GPU type, start, lease id, preemptible, slot_ptr,
slot_node, slot_idx, as in ``book.Leases``; ``lease_tier``, ``preempted``), tenant (``held``, ``share``,
``guarantee``, ``failed``), node (``free``, ``reserved``, ``initial_free``, ``slot_free``) or gang.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.jit import compiled

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]

LeaseColumns = tuple[I32, I32, I64, I64, BOOL, I64, I32, I32]


@compiled
def _victim_order(
    t: int,
    now: int,
    min_runtime: int,
    leases: LeaseColumns,
    lease_tier: I8,
    preempted: BOOL,
    held: I64,
    share: I64,
) -> I64:
    """Who may be preempted for a guarantee in type ``t``, in order: tier S leases, then tier B leases of the
    tenant furthest above its entitlement (its tier-B GPUs less its share); never tier G, never a
    non-preemptible lease, never one younger than ``min_runtime`` (youngest first otherwise, then lease id);
    never one preempted already. Returns lease rows."""
    tenant, gpu_type, start, lease, preemptible = leases[0], leases[1], leases[2], leases[3], leases[4]
    rows = np.empty(tenant.shape[0], dtype=np.int64)
    n = 0
    for v in range(tenant.shape[0]):
        if (
            not preempted[v]
            and gpu_type[v] == t
            and preemptible[v]
            and lease_tier[v] != TIER_G
            and now - start[v] >= min_runtime
        ):
            rows[n] = v
            n += 1
    rows = rows[:n]
    # a lexsort: stable sorts from the least significant key up (lease id, -start, -above), then S before B
    rows = rows[np.argsort(lease[rows], kind="mergesort")]
    rows = rows[np.argsort(-start[rows], kind="mergesort")]
    above = np.empty(n, dtype=np.int64)
    for i in range(n):
        m = tenant[rows[i]]
        above[i] = held[m, TIER_B, t] - share[m, t]
    rows = rows[np.argsort(-above, kind="mergesort")]
    out = np.empty(n, dtype=np.int64)
    j = 0
    for tier in (TIER_S, TIER_B):
        for r in rows:
            if lease_tier[r] == tier:
                out[j] = r
                j += 1
    return out


@compiled
def _on_node(leases: LeaseColumns, v: int, node: int) -> int:
    """GPUs of lease ``v`` on ``node``."""
    slot_ptr, slot_node = leases[5], leases[6]
    n = 0
    for s in range(slot_ptr[v], slot_ptr[v + 1]):
        n += slot_node[s] == node
    return n


@compiled
def _candidate_nodes(
    k: int,
    claimant: int,
    claimant_job: int,
    order: I64,
    leases: LeaseColumns,
    preempted: BOOL,
    free: I64,
    reserved_for: I64,
    count: I64,
) -> I64:
    """A screen for ``_plan_node``: the nodes where preempting victims (``order``, less the claimant's own
    leases and those preempted already) could make room for a gang of k, cheapest first: by the victims' GPUs
    there that must go, in order, until it fits (max(1, k - free)), then node index. A node reserved for a
    starving gang (``reserved_for``: its job id, -1 where none) takes no other new work, but that gang's own
    tier-G reclaim may use it. ``count``: zeros by node, left zero."""
    tenant, slot_ptr, slot_node = leases[0], leases[5], leases[6]
    seen = np.empty(slot_node.shape[0], dtype=np.int64)
    n_seen = 0
    for v in order:
        if preempted[v] or tenant[v] == claimant:
            continue
        for s in range(slot_ptr[v], slot_ptr[v + 1]):
            node = slot_node[s]
            if count[node] == 0:
                seen[n_seen] = node
                n_seen += 1
            count[node] += 1
    n_nodes = free.shape[0]
    key = np.empty(n_seen, dtype=np.int64)
    n = 0
    for node in seen[:n_seen]:
        need = max(1, k - free[node])
        if count[node] >= need and (reserved_for[node] == -1 or reserved_for[node] == claimant_job):
            key[n] = need * n_nodes + node
            n += 1
        count[node] = 0
    by_key = np.argsort(key[:n], kind="mergesort")  # the sort _victim_order compiles already
    nodes = np.empty(n, dtype=np.int64)
    for j in range(n):
        nodes[j] = key[by_key[j]] % n_nodes
    return nodes


@compiled
def _plan_node(
    t: int,
    node: int,
    k: int,
    claimant: int,
    order: I64,
    leases: LeaseColumns,
    preempted: BOOL,
    held: I64,
    guarantee: I32,
    have: int,
    chosen: I64,
    taken: I64,
) -> int:
    """Greedy victims on one node, in victim order (``order``, less the claimant's and those preempted
    already), into ``chosen``, from ``have`` free GPUs: how many, or -1 when the gang still cannot fit. A
    victim is skipped when taking it would leave its tenant below its own guarantee; ``held`` counts what the
    tenant had before the round, less earlier preemptions. ``taken``: zeros by tenant, left zero."""
    tenant, slot_ptr = leases[0], leases[5]
    n = 0
    for v in order:
        if have >= k:
            break
        if preempted[v] or tenant[v] == claimant:
            continue
        on_node = _on_node(leases, v, node)
        m, g = tenant[v], slot_ptr[v + 1] - slot_ptr[v]
        holds = held[m, TIER_G, t] + held[m, TIER_B, t] + held[m, TIER_S, t]  # of type t, every tier
        if on_node == 0 or holds - taken[m] - g < guarantee[m, t]:
            continue
        taken[m] += g
        chosen[n] = v
        n += 1
        have += on_node
    for v in chosen[:n]:
        taken[tenant[v]] = 0
    return n if have >= k else -1


@compiled
def reclaim_run(
    t: int,
    max_cap: int,
    gangs: tuple[I64, I32, I32, I64],
    leases: LeaseColumns,
    policy: tuple[int, int],
    state: tuple[I8, BOOL, I64, I64, I64, I32, I64],
    floor: tuple[I64, I64, I64, BOOL],
    node_out: I64,
    slots_out: I64,
) -> None:
    """Reclaim, ARCHITECTURE.md §Clearing step 6, for the unplaced tier-G gangs of type ``t`` in turn
    (``gangs``: their bid rows in that order, then gang size, tenant and job id by bid row): each preempts its
    victims on the first node of the screen (``_candidate_nodes``) where the greedy plan fits (``_plan_node``)
    and is placed there. A gang larger than ``max_cap`` (the largest node of the type) is not restored by
    preemption, nor one of a (tenant, type) where a gang as small has failed already this round.

    ``state``: lease tier, preempted and preempted for (job id) by lease; held by (tenant, tier, type); share,
    guarantee and ``failed``, the smallest gang reclaim could not place this round, by (tenant, type).
    ``floor``: free GPUs, the job each is reserved for (-1: none), free GPUs at the start of the round, and free
    slots then, by node.
    ``policy``: (now, min_runtime_s). Preemptions, holdings, failures and free GPUs are written in place.

    Writes each gang's node to ``node_out`` (-1: not placed) and its k slots to ``slots_out[i, :k]``: the
    node's free slots while they last (handed out in ascending order, after those taken earlier this round),
    then the lowest of the slots its victims free."""
    rows, gpus, bid_tenant, job = gangs
    now, min_runtime = policy
    lease_tier, preempted, preempted_for, held, share, guarantee, failed = state
    free, reserved_for, initial_free, slot_free = floor
    tenant, slot_ptr, slot_node, slot_idx = leases[0], leases[5], leases[6], leases[7]
    order = _victim_order(t, now, min_runtime, leases, lease_tier, preempted, held, share)
    count = np.zeros(free.shape[0], dtype=np.int64)
    taken = np.zeros(held.shape[0], dtype=np.int64)
    chosen = np.empty(order.shape[0], dtype=np.int64)  # the order only ever shrinks
    freed = np.zeros(slot_free.shape[1], dtype=np.bool_)  # by slot: freed by one gang's victims (left False)
    for i in range(rows.shape[0]):
        r = rows[i]
        k, m = gpus[r], bid_tenant[r]
        node_out[i] = -1
        if k > max_cap or failed[m, t] <= k:
            continue
        node, n = -1, -1
        for c in _candidate_nodes(k, m, job[r], order, leases, preempted, free, reserved_for, count):
            n = _plan_node(t, c, k, m, order, leases, preempted, held, guarantee, free[c], chosen, taken)
            if n >= 0:
                node = c
                break
        if node < 0:
            failed[m, t] = min(failed[m, t], k)
            continue
        from_free = min(free[node], k)
        skip, j = initial_free[node] - free[node], 0  # free slots handed out already this round
        for s in range(slot_free.shape[1]):
            if j == from_free:
                break
            if slot_free[node, s]:
                if skip > 0:
                    skip -= 1
                else:
                    slots_out[i, j] = s
                    j += 1
        tier_b = False
        for v in chosen[:n]:
            for s in range(slot_ptr[v], slot_ptr[v + 1]):
                if slot_node[s] == node:
                    freed[slot_idx[s]] = True
            preempted[v] = True
            preempted_for[v] = job[r]
            held[tenant[v], lease_tier[v], t] -= slot_ptr[v + 1] - slot_ptr[v]
            tier_b |= lease_tier[v] == TIER_B
        for s in range(freed.shape[0]):  # then the lowest of the freed slots
            if freed[s] and j < k:
                slots_out[i, j] = s
                j += 1
            freed[s] = False
        free[node] -= from_free
        node_out[i] = node
        if tier_b:  # tier-B holdings change the order's "above"; tier-S ones do not, the order stands
            order = _victim_order(t, now, min_runtime, leases, lease_tier, preempted, held, share)


@compiled
def retier_leases(leases: LeaseColumns, guarantee: I32, held: I64, lease_tier: I8) -> I64:
    """Re-tiering, ARCHITECTURE.md §Clearing step 2 (``reclaim.retier``): by (tenant, type), the leases not in
    tier G, oldest first (start, then lease id), are first-fit into what the tenant's guarantee lacks in tier
    G (guarantee less tier-G holdings), whole leases; those that fit move to tier G (``lease_tier`` and
    ``held``, by tenant, tier and type, in place). Returns their rows, in that order. One call: in numpy the
    rule took a dozen calls, 63 us for the 62 leases of the benchmark book at 10^4 bids."""
    tenant, gpu_type, start, lease, slot_ptr = leases[0], leases[1], leases[2], leases[3], leases[5]
    cand = np.flatnonzero(lease_tier != TIER_G)
    if cand.shape[0] == 0:
        return cand
    cand = cand[np.argsort(lease[cand], kind="mergesort")]  # least significant key first, each sort stable
    cand = cand[np.argsort(start[cand], kind="mergesort")]
    seg = tenant[cand].astype(np.int64) * held.shape[2] + gpu_type[cand]
    cand = cand[np.argsort(seg, kind="mergesort")]
    gap = np.maximum(guarantee - held[:, TIER_G, :], 0)
    taken = np.empty(cand.shape[0], dtype=np.int64)
    n = 0
    for v in cand:
        m, t, k = tenant[v], gpu_type[v], slot_ptr[v + 1] - slot_ptr[v]
        if k <= gap[m, t]:
            gap[m, t] -= k
            taken[n] = v
            n += 1
    for v in taken[:n]:
        m, t, k = tenant[v], gpu_type[v], slot_ptr[v + 1] - slot_ptr[v]
        held[m, lease_tier[v], t] -= k
        held[m, TIER_G, t] += k
        lease_tier[v] = TIER_G
    return taken[:n]
