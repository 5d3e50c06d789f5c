"""Re-tiering (ARCHITECTURE.md §Clearing step 2) and reclaim by preemption (step 6)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import Leases
from allocator.reclaim_kernels import LeaseColumns, reclaim_run, retier_leases
from allocator.state import RoundState

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


def lease_columns(ls: Leases) -> LeaseColumns:
    """The lease columns the reclaim kernels read (``reclaim_kernels.LeaseColumns``)."""
    return (
        ls.tenant,
        ls.gpu_type,
        ls.start,
        ls.lease,
        ls.preemptible,
        ls.slot_ptr,
        ls.slot_node,
        ls.slot_idx,
    )


def retier(state: RoundState) -> None:
    """Re-tiering, ARCHITECTURE.md §Clearing step 2: while a tenant holds fewer tier-G GPUs than its guarantee,
    its borrowed and spot leases (oldest first, whole leases, first-fit) become tier G and stop being
    preemptible, so a tenant's leases within its guarantee are always tier G (``reclaim_kernels.retier_leases``).
    """
    ls = state.book.leases
    take = retier_leases(lease_columns(ls), state.book.tenants.guarantee, state.held, state.lease_tier)
    if take.size:
        state.retiered = np.sort(ls.lease[take])


def reclaim_for(state: RoundState, t: int, rows: I64) -> BOOL:
    """Reclaim, ARCHITECTURE.md §Clearing step 6: each unplaced tier-G gang of type ``t`` (bid ``rows``, in
    turn) preempts the cheapest set of eligible victims that lets it fit on one node and is placed there
    (``reclaim_kernels.reclaim_run``, one call for all). Returns which gangs were placed."""
    book, floor = state.book, state.floor
    bids, ls = book.bids, book.leases
    max_cap = int(floor.max_cap[t])
    node = np.empty(rows.shape[0], dtype=np.int64)
    slots = np.empty((rows.shape[0], max_cap), dtype=np.int64)
    # a starving gang may reclaim on the nodes reserved for it (it reserved them when it did not fit)
    reserved_for = floor.unreserved  # every reserved node is in reserved_jobs (clearing.serve_starving)
    if state.reserved_jobs:
        reserved_for = np.where(floor.reserved, np.iinfo(np.int64).min, -1)
        for reserved_node, reserved_job in state.reserved_jobs:
            reserved_for[reserved_node] = reserved_job
    reclaim_run(
        t,
        max_cap,
        (rows, bids.gpus, bids.tenant, bids.job),
        lease_columns(ls),
        (book.now, book.policy.min_runtime_s),
        (
            state.lease_tier,
            state.preempted,
            state.preempted_for,
            state.held,
            state.share,
            book.tenants.guarantee,
            state.reclaim_failed,
        ),
        (floor.free, reserved_for, floor.initial_free, book.nodes.free),
        node,
        slots,
    )
    placed = node >= 0
    if placed.any():
        won = np.compress(placed, rows)
        floor.record_explicit(won, np.compress(placed, node), slots[placed], bids.gpus[won].astype(np.int64))
    return placed
