"""One clearing round, ARCHITECTURE.md §Clearing: the orchestration of the named rules.

Bids accepting several GPU types are cleared in passes: in pass j every bid still pending tries its j-th
preferred type (largest margin of limit over posted price first). Pass 0 runs every tier; later passes see only
what earlier passes left (fragments), so they run tier G and then spot (tier S) on the leftovers.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator import placement as pl
from allocator.book import TIER_B, TIER_G, TIER_S, Book
from allocator.reclaim import reclaim_for, retier
from allocator.result import BELOW_RESERVE, GUARANTEE_FULL, NO_FIT, OUTBID, Result
from allocator.result_build import build_result
from allocator.state import RoundState
from allocator.tiers import (
    budget_filter,
    by_tenant,
    limit_holds,
    market_order,
    preference_order,
    tier_b,
    tier_g_pos,
    tier_s,
)

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]


def clear(book: Book) -> Result:
    """Clear one round: a pure function of the book; the same book gives the same result, byte for byte."""
    state = RoundState.start(book)
    retier(state)
    prefs = preference_order(book.bids, book.types)
    mark_below_reserve(state, prefs[:, 0] < 0)
    pending = prefs[:, 0] >= 0
    for j in range(prefs.shape[1]):
        rows = np.flatnonzero(pending & (prefs[:, j] >= 0))
        if rows.size == 0:
            break
        run_pass(state, rows, prefs[:, j], first=j == 0)
        pending &= state.win_tier < 0
    return build_result(state)


def mark_below_reserve(state: RoundState, below: BOOL) -> None:
    """Eligibility, ARCHITECTURE.md §Clearing step 1: a bid below the reserve price of every type it accepts
    never wins; its figure is the lowest reserve among those types."""
    rows = np.flatnonzero(below)
    limit, reserve = state.book.bids.limit[rows], state.book.types.reserve
    state.reason[rows] = BELOW_RESERVE
    accepted = np.where(limit >= 0, reserve[None, :], np.iinfo(np.int64).max)
    state.reason_type[rows] = np.argmin(accepted, axis=1)
    state.figure[rows] = accepted.min(axis=1) if rows.size else 0


def run_pass(state: RoundState, rows: I64, choice: NDArray[np.int32], *, first: bool) -> None:
    """One pass: budget filter over every type at once, then each type's tiers and placement."""
    bids, n_tenants = state.book.bids, len(state.book.tenants)
    if rows.size == len(bids) and bids.limit.shape[1] == 1:
        price, need = bids.limit[:, 0], limit_holds(bids.gpus, bids.limit[:, 0], bids.max_s)
    else:
        price = np.zeros(len(bids), dtype=np.int64)
        price[rows] = bids.limit[rows, choice[rows]]
        need = np.zeros(len(bids), dtype=np.int64)
        need[rows] = limit_holds(bids.gpus[rows], price[rows], bids.max_s[rows])
    ordered = market_order(rows, price, state.rank)
    grouped = by_tenant(ordered, bids.tenant, n_tenants)
    refused = budget_filter(grouped, bids.tenant, need, state.budget_left)
    mark_over_budget(state, refused, choice, need)
    ok = np.ones(len(bids), dtype=np.bool_)
    ok[refused] = False
    for t in range(len(state.book.types)):
        sel = ok if len(state.book.types) == 1 else ok & (choice == t)
        mkt = ordered if not refused.size and sel is ok else ordered[sel[ordered]]
        if mkt.size:
            clear_type(state, t, mkt, price[mkt], first=first)
    won = rows[state.win_tier[rows] >= 0]
    state.budget_left -= sum_by(bids.tenant[won], need[won], n_tenants)


def sum_by(keys: NDArray[np.int32], values: I64, n: int) -> I64:
    """Exact integer sums of ``values`` per key (float bincount while it is exact, else ufunc.at)."""
    if values.size == 0 or int(values.sum()) < (1 << 53):
        return np.bincount(keys, weights=values, minlength=n).astype(np.int64)
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, keys, values)
    return out


def mark_over_budget(state: RoundState, rows: I64, choice: NDArray[np.int32], need: I64) -> None:
    """Budget filter outcome, ARCHITECTURE.md §Clearing step 1: the first pass that refuses a bid sets its reason
    (over budget or guardrail) and figure (the hold it needed)."""
    fresh = rows[~state.over_budget[rows]]
    state.over_budget[fresh] = True
    state.reason_type[fresh] = choice[fresh]
    state.figure[fresh] = need[fresh]


def clear_type(state: RoundState, t: int, mkt: I64, price: I64, *, first: bool) -> None:
    """Tiers G, B, S by count, then placement and reclaim, for the admitted bids ``mkt`` (market order) of one
    type; ``price`` is their limit there. Arrays below are indexed by position in ``mkt``."""
    book, floor = state.book, state.floor
    gpus, tenant = book.bids.gpus[mkt], book.bids.tenant[mkt]
    ten = np.argsort(tenant.astype(np.int16) if len(book.tenants) < 32768 else tenant, kind="stable")
    unused = np.maximum(book.tenants.guarantee[:, t] - state.held_total(t), 0)
    tier = np.full(mkt.size, -1, dtype=np.int8)
    g_pos = ten[tier_g_pos(tenant[ten], gpus[ten], unused)]
    tier[g_pos] = TIER_G
    supply = int(floor.free[pl.open_nodes(floor, t)].sum()) - int(gpus[g_pos].sum())
    if first:
        cand = ten[(tier[ten] < 0) & (price[ten] >= book.types.posted[t])]
        b_mask, state.share[:, t] = tier_b(tenant[cand], gpus[cand], book.tenants.weight, max(supply, 0))
        tier[cand[b_mask]] = TIER_B
        supply -= int(gpus[cand[b_mask]].sum())
    rest = np.flatnonzero(tier < 0)
    tier[rest[tier_s(gpus[rest], supply)]] = TIER_S
    placed = place_all(state, t, mkt, tier, price >= book.types.posted[t])
    left = unused - np.bincount(tenant[g_pos], weights=gpus[g_pos], minlength=unused.shape[0]).astype(
        np.int64
    )
    record(state, t, mkt, tier, placed, price, left[tenant] < gpus, spot_supply=supply)


def place_all(state: RoundState, t: int, mkt: I64, tier: NDArray[np.int8], at_p: BOOL) -> BOOL:
    """Placement, ARCHITECTURE.md §Clearing step 5: starving gangs first, then G, B, S, then every other admitted
    bid that still fits (as spot, so no GPU stays idle while a bid fits); then reclaim for unplaced G gangs."""
    floor, gpus = state.floor, state.book.bids.gpus
    placed = np.zeros(mkt.size, dtype=np.bool_)
    serve_starving(state, t, mkt, (tier >= 0) | at_p, placed)
    for group in (TIER_G, TIER_B, TIER_S, -1):
        pos = np.flatnonzero((tier == group) & ~placed)
        placed[pos[pl.place_rows(floor, t, mkt[pos], gpus)]] = True
    tier[(tier < 0) & placed] = TIER_S
    g_left = np.flatnonzero((tier == TIER_G) & ~placed)
    g_left = g_left[
        np.argsort(state.book.bids.tenant[mkt[g_left]], kind="stable")
    ]  # tenant, then market order
    for at in g_left.tolist():
        if reclaim_for(state, t, int(mkt[at])):
            placed[at] = True
            state.count("reclaimed_gangs")
        else:
            state.count("guarantee_unrestored")
    return placed


def serve_starving(state: RoundState, t: int, mkt: I64, competitive: BOOL, placed: BOOL) -> None:
    """No starvation, ARCHITECTURE.md §Clearing step 5: a gang that has waited at least ``starve_rounds`` and
    competes (selected by a tier, or bidding at least the posted price) is placed before everything else; if it
    does not fit, nodes are reserved for it (longest wait first, at most ``max_reservations`` per type)."""
    book, floor = state.book, state.floor
    waited = book.bids.waited[mkt]
    starving = np.flatnonzero(competitive & (waited >= book.policy.starve_rounds))
    starving = starving[np.argsort(-waited[starving], kind="stable")][: book.policy.max_reservations]
    for pos in starving.tolist():
        row = int(mkt[pos])
        if pl.place_one(floor, t, int(book.bids.gpus[row]), row):
            placed[pos] = True
            state.count("starving_placed")
            continue
        nodes = pl.reserve_for(floor, t, int(book.bids.gpus[row])).tolist()
        state.reserved_jobs += [(node, int(book.bids.job[row])) for node in nodes]
        state.count("starving_reserved", 1 if nodes else 0)


def record(
    state: RoundState,
    t: int,
    mkt: I64,
    tier: NDArray[np.int8],
    placed: BOOL,
    price: I64,
    full: BOOL,
    *,
    spot_supply: int,
) -> None:
    """Write the winners of this type and, for the rest, the reason they lost here (docs/allocator.md).
    ``full``: the bid no longer fits its tenant's unused guarantee."""
    bids, book = state.book.bids, state.book
    win = mkt[placed]
    state.win_tier[win] = tier[placed]
    state.win_type[win] = t
    state.won[:, t] += np.bincount(
        bids.tenant[win], weights=bids.gpus[win], minlength=len(book.tenants)
    ).astype(np.int64)
    spot = placed & (tier == TIER_S)
    low = int(price[spot].min()) if spot.any() else -1
    if low >= 0:
        state.s_low[t] = low if state.s_low[t] < 0 else min(low, int(state.s_low[t]))
    lost = np.flatnonzero(~placed)
    if lost.size:
        state.s_lose[t] = max(int(state.s_lose[t]), int(price[lost].max()))
    lost = lost[~state.over_budget[mkt[lost]]]  # an earlier refusal by the budget filter stands
    rows, p_lost, t_lost = mkt[lost], price[lost], tier[lost]
    p = int(book.types.posted[t])
    reason = np.full(lost.size, NO_FIT, dtype=np.int8)
    figure = np.full(lost.size, pl.largest_fit(state.floor, t), dtype=np.int64)
    unsold = t_lost < 0
    if spot_supply <= 0:
        gfull = unsold & full[lost] & (p_lost < p)
        reason[gfull], figure[gfull] = GUARANTEE_FULL, p
        reason[unsold & ~gfull], figure[unsold & ~gfull] = OUTBID, -1
    elif low >= 0:
        cheap = unsold & (p_lost <= low)
        reason[cheap], figure[cheap] = OUTBID, low + 1
    state.reason_type[rows] = t
    state.reason[rows] = reason
    state.figure[rows] = figure


__all__ = ["clear"]
