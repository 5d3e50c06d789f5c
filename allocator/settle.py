"""One type's clearing after market order as one compiled call (``allocator.jit``): tiers G, B and S, the
starving gangs, placement, reclaim and the outcome of every bid, ARCHITECTURE.md §Clearing steps 2-6.

Why one call: at 10^4 bids a type's clearing was some forty calls from Python (each rule a kernel or a few
numpy calls, with the arrays between them). In one call a 10^4-bid round went from 0.9 to 0.8 ms with one type
and from 2.1-2.2 to 1.8 ms with three; most of what is left is the work inside the rules (docs/allocator.md,
"Speed"). This kernel calls the same compiled rules in the same order (``kernels``, ``reclaim_kernels``);
``clearing.clear_slate`` takes it whenever the whole type is on the slate (nothing below θ) and no gang is
larger than a node of the type, and the step-by-step path otherwise (gangs on whole nodes of a domain are
placed by numpy code). Both give the same result, byte for byte: a property test
(``test_one_compiled_call_per_type_changes_nothing``) clears random books both ways.

Arrays are indexed by position on the slate (market order: ``slate``, ``tier``, ``placed``), by bid row
(``bids``, ``notes``), by tenant (``unused``, ``weight``, and the (tenant, type) tables), by node (``floor``) or
by lease (``leases``, as in ``reclaim_kernels``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator import kernels, reclaim_kernels
from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.jit import compiled, forget_when_changed
from allocator.kernels import (
    best_node,
    counting_order,
    first_fit,
    first_fit_pool,
    largest_fit,
    note_outcomes,
    place_sizes,
    placement_keys,
    roomiest_node,
    starving_order,
    tier_b_fill,
)
from allocator.reclaim_kernels import LeaseColumns, reclaim_run

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]
F64 = NDArray[np.float64]

forget_when_changed(__file__, kernels.__file__, reclaim_kernels.__file__)

NOT_TAKEN = (
    -1
)  # ``settle_type``'s status when a gang is larger than every node of the type: nothing was changed

# (starving placed, starving reserved, reclaimed gangs, guarantee unrestored): the round's counters it adds to
Counts = tuple[int, int, int, int]
# per gang that reclaim tried, in its order: the bid row, the node (-1: not placed) and its slots
Reclaimed = tuple[I64, I64, I64]


@compiled
def settle_type(
    slate: tuple[I64, I64, I32, I32],
    out: tuple[I8, BOOL, I64],
    round_: tuple[int, bool, int, int, bool, int, bool],
    tenants: tuple[I64, F64, I64, I64],
    bids: tuple[I64, I32, I32, I64, BOOL, I32],
    floor: tuple[I64, I64, BOOL, BOOL, I64, I32, I32, int],
    log: tuple[I64, I64, I64, I64, I8, I32],
    entries: int,
    reserved_jobs: tuple[I64, I64],
    leases: LeaseColumns,
    policy: tuple[int, int],
    lease_state: tuple[I8, BOOL, I64, I64, I32, I64],
    slot_free: BOOL,
    notes: tuple[BOOL, BOOL, I8, I32, I64],
    spot: tuple[I64, I64],
) -> tuple[int, int, Counts, I64, Reclaimed]:
    """Clear type t for the bids of ``slate`` (rows, price, gpus, tenant by position, in market order), every
    bid of the type this pass; what ``clearing.clear_slate`` does step by step when no bid is below θ.

    ``round_``: (t, first pass, posted p, free GPUs on open nodes, room: some GPU free (else no placement is
    tried), most reservations, any starving bid). ``tenants``: (unused guarantee, weight, share and won by
    (tenant, type)). ``bids``: (price tried this pass, tenant, gpus, job, starving, rounds waited). ``floor``:
    (the type's nodes, free, reserved, touched, free at the start, capacity, domain, largest node of the type);
    ``log`` the floor's placement columns from entry ``entries`` on; ``reserved_jobs``: (node, job) of the
    reservations made so far. ``leases``, ``policy`` and ``lease_state`` (lease tier, preempted, preempted
    for, held, guarantee, failed) as ``reclaim_kernels.reclaim_run``; ``slot_free``: free slots at the start,
    by node. ``notes``: (won, over budget, reason, type tried, figure) by bid row; ``spot``: the lowest spot
    winner and highest loser per type. ``out``: tier and placed by position, and the winning rows.

    Returns (status, the next free log entry, counts, the reservations made as (node, job) rows, what reclaim
    placed): status ``NOT_TAKEN`` when a gang is larger than every node of the type (nothing changed), else
    the number of winning rows written to ``out[2]``."""
    rows, s_price, s_gpus, s_tenant = slate
    tier, placed, won_rows = out
    t, first, posted, free, room, max_reservations, any_starving = round_
    unused, weight, share, won_by_type = tenants
    price, bid_tenant, bid_gpus, job, starving, waited = bids
    ix, node_free, reserved, touched, initial_free, capacity, domain, max_cap = floor
    log_row, log_node, log_count, log_offset, log_tier, log_type = log
    lease_tier, preempted, preempted_for, held, guarantee, failed = lease_state
    n = rows.shape[0]
    g_max = 0
    for i in range(n):
        g_max = max(g_max, s_gpus[i])
    no_reclaim = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0), np.int64))
    if g_max > max_cap:
        return NOT_TAKEN, entries, (0, 0, 0, 0), np.zeros((0, 2), np.int64), no_reclaim

    # tiers G, B, S by count (tiers.tier_g, tier_b, tier_s)
    left = unused.copy()
    supply = free
    if left.any():
        supply -= first_fit(tier, TIER_G, n, s_tenant, s_gpus, left)
    if first:
        at_p = 0
        while at_p < n and s_price[at_p] >= posted:
            at_p += 1
        e_t = np.empty(share.shape[0], dtype=np.int64)
        supply -= tier_b_fill(tier, at_p, s_tenant, s_gpus, weight, max(supply, 0), e_t)
        share[:, t] = e_t
    first_fit_pool(tier, TIER_S, s_gpus, max(supply, 0))

    # starving gangs first (clearing.serve_starving): placed best fit, else a node reserved for each
    placed_starving = reserved_count = 0
    done = np.empty(n, dtype=np.int64)
    n_done = 0
    new_reserved = np.empty((max_reservations, 2), dtype=np.int64)
    if any_starving:
        order = np.empty(n, dtype=np.int64)
        m = starving_order(rows, starving, tier, s_price, posted, waited, order)
        for at in order[: min(m, max_reservations)]:
            row, k = rows[at], s_gpus[at]
            if room:
                j = best_node(ix, node_free, reserved, k)
                if j >= 0:  # placement.Floor.take_one
                    log_row[entries], log_node[entries], log_count[entries] = row, j, k
                    log_offset[entries] = initial_free[j] - node_free[j]
                    log_tier[entries] = TIER_S if tier[at] < 0 else tier[at]
                    log_type[entries] = t
                    entries += 1
                    touched[j] = True
                    node_free[j] -= k
                    placed[at] = True
                    done[n_done] = at
                    n_done += 1
                    placed_starving += 1
                    continue
            j = roomiest_node(ix, node_free, reserved, touched, capacity, k)  # placement.reserve_for
            if j >= 0:
                reserved[j] = True
                new_reserved[reserved_count, 0], new_reserved[reserved_count, 1] = j, job[row]
                reserved_count += 1

    # placement of the groups G, B, S and the rest, each largest gang first (clearing.place_all)
    if room:
        stride = g_max + 1
        key, order = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        placement_keys(tier, s_gpus, done[:n_done], stride, key)
        start = counting_order(key, 5 * stride, order)
        open_ix = np.empty(ix.shape[0], dtype=np.int64)
        n_open = 0
        for j in ix:
            if not reserved[j] and node_free[j] > 0:
                open_ix[n_open] = j
                n_open += 1
        if n_open:
            group_tier = np.array([TIER_G, TIER_B, TIER_S, TIER_S], dtype=np.int8)
            entries, _ = place_sizes(
                open_ix[:n_open],
                node_free,
                initial_free,
                (order, start, stride),
                (0, 4),
                (group_tier, t),
                rows,
                placed,
                np.zeros(0, dtype=np.bool_),
                log,
                entries,
                touched,
            )
        for i in range(n):
            if tier[i] == -1 and placed[i]:
                tier[i] = TIER_S

    # reclaim for the tier-G gangs left unplaced, by tenant, each tenant's in market order (reclaim.reclaim_for)
    n_left = 0
    for i in range(n):
        if tier[i] == TIER_G and not placed[i]:
            n_left += 1
    reclaimed = unrestored = 0
    gone = no_reclaim
    if n_left:
        g_left = np.empty(n_left, dtype=np.int64)
        m = 0
        for i in range(n):
            if tier[i] == TIER_G and not placed[i]:
                g_left[m] = i
                m += 1
        g_left = g_left[np.argsort(s_tenant[g_left], kind="mergesort")]
        g_rows = rows[g_left]
        reserved_for = np.full(node_free.shape[0], -1, dtype=np.int64)
        if reserved_jobs[0].shape[0] or reserved_count:
            for j in range(node_free.shape[0]):  # reclaim.reclaim_for: none is left unnamed
                reserved_for[j] = np.iinfo(np.int64).min if reserved[j] else -1
            for r in range(reserved_jobs[0].shape[0]):
                reserved_for[reserved_jobs[0][r]] = reserved_jobs[1][r]
            for r in range(reserved_count):
                reserved_for[new_reserved[r, 0]] = new_reserved[r, 1]
        node_out = np.empty(n_left, dtype=np.int64)
        slots_out = np.empty((n_left, max_cap), dtype=np.int64)
        reclaim_run(
            t,
            max_cap,
            (g_rows, bid_gpus, bid_tenant, job),
            leases,
            policy,
            (lease_tier, preempted, preempted_for, held, share, guarantee, failed),
            (node_free, reserved_for, initial_free, slot_free),
            node_out,
            slots_out,
        )
        for r in range(n_left):
            if node_out[r] >= 0:
                placed[g_left[r]] = True
                reclaimed += 1
        unrestored = n_left - reclaimed
        gone = (g_rows, node_out, slots_out)

    # the outcome of every bid of the type (clearing.record)
    won = np.zeros(unused.shape[0], dtype=np.int64)
    largest = largest_fit(ix, node_free, reserved, capacity, domain) if room else 0
    low, lose = note_outcomes(
        (rows, s_price, s_tenant, s_gpus),
        tier,
        placed,
        np.zeros(0, dtype=np.int64),
        (price, bid_tenant, bid_gpus),
        notes,
        won,
        left,
        t,
        posted,
        supply,
        largest,
    )
    won_by_type[:, t] += won
    s_low, s_lose = spot
    if low >= 0:
        s_low[t] = low if s_low[t] < 0 else min(low, s_low[t])
    if lose >= 0:
        s_lose[t] = max(s_lose[t], lose)
    n_won = 0
    for i in range(n):
        if placed[i]:
            won_rows[n_won] = rows[i]
            n_won += 1
    counts = (placed_starving, reserved_count, reclaimed, unrestored)
    return n_won, entries, counts, new_reserved[:reserved_count], gone
