"""Turn a finished round's working state into the frozen Result (prices, holds, GPUs, reasons)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S, hold_of
from allocator.reference.placement import free_slots
from allocator.reference.prices import next_posted
from allocator.reference.reserve import NEVER
from allocator.reference.state import RoundState
from allocator.reference.tiers import spot_price
from allocator.result import OVER_BUDGET, Losers, Moves, Preemptions, Result, Winners

I64 = NDArray[np.int64]


def spot_prices(state: RoundState) -> I64:
    """The uniform tier-S price per type (-1 where no spot winner), step 4."""
    types = state.book.types
    out = np.full(len(types), -1, dtype=np.int64)
    for t in range(len(types)):
        if state.s_low[t] >= 0:
            out[t] = spot_price(
                int(types.reserve[t]), int(types.posted[t]), int(state.s_lose[t]), int(state.s_low[t])
            )
    return out


def winners(state: RoundState, spot: I64) -> Winners:
    """One row per placed gang, in placement order: tier G pays r, tier B pays p, tier S the spot price."""
    book, batches = state.book, state.floor.batches
    if not batches:
        z = np.zeros(0, dtype=np.int64)
        return Winners(
            z,
            z,
            z.astype(np.int32),
            z.astype(np.int8),
            z.astype(np.int32),
            z,
            z,
            np.zeros(1, np.int64),
            z.astype(np.int32),
            z.astype(np.int32),
        )
    ptr, fslots = free_slots(book.nodes)
    row = np.concatenate([b.row for b in batches])
    node = np.concatenate([b.node for b in batches])
    count = np.concatenate([b.count for b in batches])
    sizes = [b.row.size for b in batches]
    tier = np.repeat(np.array([b.tier for b in batches], dtype=np.int8), sizes)
    gtype = np.repeat(np.array([b.gpu_type for b in batches], dtype=np.int32), sizes)
    table = np.stack([book.types.reserve, book.types.posted, spot])  # by tier, then type
    each = np.repeat(np.array([table[b.tier, b.gpu_type] for b in batches], dtype=np.int64), sizes)
    slot = np.concatenate(
        [b.slots if b.slots is not None else _offset_slots(b, ptr, fslots) for b in batches]
    )
    gpu_node = np.repeat(node, count)
    if not state.floor.spread:  # every gang on one node: one entry each
        gang_gpus, w_row, w_tier, w_type, price = count, row, tier, gtype, each
    else:  # a gang on several nodes has consecutive entries
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        gang_gpus = np.add.reduceat(count, starts)
        w_row, w_tier, w_type, price = row[starts], tier[starts], gtype[starts], each[starts]
    bids = book.bids
    slot_ptr = np.zeros(w_row.size + 1, dtype=np.int64)
    np.cumsum(gang_gpus, out=slot_ptr[1:])
    return Winners(
        bids.job[w_row],
        w_row,
        bids.tenant[w_row],
        w_tier,
        w_type,
        price,
        np.asarray(hold_of(gang_gpus, price, bids.max_s[w_row]), dtype=np.int64),
        slot_ptr,
        gpu_node.astype(np.int32),
        slot.astype(np.int32),
    )


def _offset_slots(b: object, ptr: I64, fslots: I64) -> I64:
    """Slots of a batch given by free-slot offsets: a node's free slots are handed out in ascending order."""
    node, count, offset = b.node, b.count, b.offset  # type: ignore[attr-defined]  # b is any batch with node, count and offset arrays (duck-typed)
    if count.size and int(count.min()) == int(count.max()):  # one gang size (best_fit's batches): no repeats
        return np.asarray(
            fslots[(ptr[node] + offset)[:, None] + np.arange(int(count[0]))], dtype=np.int64
        ).ravel()
    rep = np.repeat(np.arange(node.size), count)
    j = np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)
    return np.asarray(fslots[ptr[node[rep]] + offset[rep] + j], dtype=np.int64)


def losers(state: RoundState) -> Losers:
    """Every bid that did not win, in bid-row order, with its reason and figure; over budget overrides a later
    reason (the figure stays the hold it needed)."""
    rows = np.flatnonzero(state.won_tier < 0)
    reason = np.where(state.over_budget[rows], OVER_BUDGET, state.reason[rows]).astype(np.int8)
    return Losers(state.book.bids.job[rows], rows, reason, state.reason_type[rows], state.figure[rows])


def moves(state: RoundState) -> Moves:
    """The leases consolidation moved, by lease row, with their new GPUs."""
    m = state.moved
    if not m.rows:
        return Moves.empty()
    order = np.argsort(np.array(m.rows), kind="stable")
    rows = np.array(m.rows, dtype=np.int64)[order]
    slots = [m.slots[i] for i in order.tolist()]
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum([s.size for s in slots], out=ptr[1:])
    node = np.repeat(np.array(m.nodes, dtype=np.int64)[order], [s.size for s in slots])
    return Moves(
        state.book.leases.lease[rows],
        rows,
        ptr,
        node.astype(np.int32),
        np.concatenate(slots).astype(np.int32),
    )


def build_result(state: RoundState) -> Result:
    """Assemble the Result of the round; its digest is computed on construction."""
    book, pre = state.book, state.pre
    spot = spot_prices(state)
    gone = np.flatnonzero(pre.preempted)
    floor = state.floor
    reserved = sorted(floor.reserved_for.items())
    state.counters["reserved_idle_gpus"] = int(sum(int(floor.free[n]) for n, _ in reserved))
    return Result(
        round=int(book.round),
        winners=winners(state, spot),
        losers=losers(state),
        preemptions=Preemptions(
            book.leases.lease[gone], gone, pre.preempt_reason[gone].astype(np.int8), pre.preempted_for[gone]
        ),
        retiered=state.retiered,
        posted=next_posted(book, state.schedulable),
        spot_price=spot,
        reserved_node=np.array([n for n, _ in reserved], dtype=np.int32),
        reserved_job=np.array([j for _, j in reserved], dtype=np.int64),
        # -1: unknown (a node whose running jobs have no expected end never drains in the forecast)
        reserved_start=np.array(
            [s if (s := floor.reserved_start.get(n, -1)) < NEVER else -1 for n, _ in reserved], dtype=np.int64
        ),
        backfill_job=np.sort(book.bids.job[np.array(floor.backfilled, dtype=np.int64)]),
        moves=moves(state),
        counters=dict(state.counters),
        type_names=book.types.names,
        node_names=book.nodes.names,
        tenant_names=book.tenants.names,
    )


__all__ = ["TIER_B", "TIER_G", "TIER_S", "build_result"]
