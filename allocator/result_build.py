"""Turn the working state of a finished round into the frozen Result (prices, holds, GPUs, reasons)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.kernels import demand_at, loser_columns, winner_columns
from allocator.placement import slot_lookup
from allocator.result import (
    RECLAIM,
    Background,
    Losers,
    Preemptions,
    Result,
    Winners,
)
from allocator.state import RoundState
from allocator.tiers import next_posted, spot_price

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]


def spot_prices(state: RoundState) -> I64:
    """The uniform tier-S price per type (-1 where no spot winner), ARCHITECTURE.md §Clearing step 4."""
    types = state.book.types
    out = np.full(len(types), -1, dtype=np.int64)
    for t in range(len(types)):
        if state.s_low[t] >= 0:
            out[t] = spot_price(
                int(types.reserve[t]), int(types.posted[t]), int(state.s_lose[t]), int(state.s_low[t])
            )
    return out


def posted_prices(state: RoundState) -> I64:
    """Posted price update, ARCHITECTURE.md §Clearing step 7: demand is every GPU asked at or above p in the
    type, supply the GPUs free in it at the start of the round."""
    book, types, step_bp = state.book, state.book.types, state.book.policy.price_step_bp
    limit, gpus = book.bids.limit, book.bids.gpus
    supply = np.bincount(
        book.nodes.gpu_type, weights=book.nodes.free_count.astype(np.float64), minlength=len(types)
    )
    supply = supply.astype(np.int64)
    demand = demand_at(np.ascontiguousarray(limit), gpus, types.posted)
    return next_posted(types.posted, types.reserve, types.max_price, demand, supply, step_bp)


_NO_EXPLICIT = (
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
    np.zeros(1, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
)  # no placement on GPUs freed by preemption (read only)


def winners(state: RoundState, spot: I64) -> Winners:
    """The winners table (``kernels.winner_columns``): tier G pays r, tier B pays p, tier S the uniform spot
    price; hold at that price."""
    bids, types, floor = state.book.bids, state.book.types, state.floor
    table = np.concatenate((types.reserve, types.posted, spot))  # tier G, B, S by type
    n, ex = floor.entries, floor.explicit
    explicit = _NO_EXPLICIT
    if ex:
        gpus = np.concatenate([e[3] for e in ex])
        slots = [e[2][np.arange(e[2].shape[1]) < e[3][:, None]] for e in ex]  # row by row, the first gpus
        explicit = (
            np.concatenate([e[0] for e in ex]),
            np.concatenate([e[1] for e in ex]),
            np.concatenate(slots).astype(np.int32),
            np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(gpus)]),
            np.concatenate([np.full(e[0].shape[0], e[4], dtype=np.int32) for e in ex]),
        )
    m, n_gpus = n + explicit[0].shape[0], int(floor.log_count[:n].sum()) + explicit[2].shape[0]
    out = (
        np.empty(m, np.int64),
        np.empty(m, np.int8),
        np.empty(m, np.int32),
        np.empty(m, np.int64),
        np.empty(m + 1, np.int64),
        np.empty(n_gpus, np.int32),
        np.empty(n_gpus, np.int32),
    )
    by_winner = (np.empty(m, np.int64), np.empty(m, np.int32), np.empty(m, np.int64))
    by_row = (bids.job, bids.tenant, bids.max_s)
    w = winner_columns(floor.logged(), explicit, slot_lookup(floor), table, by_row, out, by_winner)
    rows, tier, gtype, price, ptr, node, slot = out
    job, tenant, hold = by_winner
    return Winners(
        job[:w], rows[:w], tenant[:w], tier[:w], gtype[:w], price[:w], hold[:w], ptr[: w + 1], node, slot
    )


def losers(state: RoundState) -> Losers:
    """Every bid that did not win, with its reason code and figure."""
    n = len(state.book.bids) - int(np.count_nonzero(state.won_bid))
    out = (
        np.empty(n + 1, np.int64),
        np.empty(n + 1, np.int8),
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int64),
    )
    loser_columns(state.won_bid, (state.reason, state.over_budget, state.reason_type, state.figure), out)
    rows, reason, gpu_type, figure = out[0][:n], out[1][:n], out[2][:n], out[3][:n]
    job = state.book.bids.job[rows]
    return Losers(job, rows, reason, gpu_type, figure)


def _losers_side(state: RoundState) -> tuple[Losers, I64]:
    """The losers table and the next posted prices: what ``build_result`` builds on a second thread while the
    winners table is built (both only read the state)."""
    return losers(state), posted_prices(state)


def build_result(state: RoundState) -> Result:
    """Assemble the Result of the round; its digest is computed on construction."""
    book = state.book
    spot = spot_prices(state)
    pre = np.flatnonzero(state.preempted)
    reserved = sorted(state.reserved_jobs)
    side = Background(_losers_side, state) if len(book.bids) > 1 << 16 else None
    won = winners(state, spot)
    lost, posted = side.get() if side is not None else _losers_side(state)
    return Result(
        round=int(book.round),
        winners=won,
        losers=lost,
        preemptions=Preemptions(
            book.leases.lease[pre], pre, np.full(pre.size, RECLAIM, dtype=np.int8), state.preempted_for[pre]
        ),
        retiered=state.retiered,
        posted=posted,
        spot_price=spot,
        reserved_node=np.array([r[0] for r in reserved], dtype=np.int32),
        reserved_job=np.array([r[1] for r in reserved], dtype=np.int64),
        counters=dict(state.counters),
        type_names=book.types.names,
        node_names=book.nodes.names,
        tenant_names=book.tenants.names,
    )
