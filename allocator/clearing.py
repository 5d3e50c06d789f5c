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
    tier_g,
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
    price = np.zeros(len(bids), dtype=np.int64)
    price[rows] = bids.limit[rows, choice[rows]]
    need = np.zeros(len(bids), dtype=np.int64)
    need[rows] = limit_holds(bids.gpus[rows], price[rows], bids.max_s[rows])
    ordered = market_order(rows, price, state.rank)
    grouped = by_tenant(ordered, bids.tenant, n_tenants)
    admitted = budget_filter(grouped, bids.tenant, need, state.budget_left)
    mark_over_budget(state, grouped[~admitted], choice, need)
    ok = np.zeros(len(bids), dtype=np.bool_)
    ok[grouped[admitted]] = True
    for t in range(len(state.book.types)):
        sel = ok & (choice == t)
        mkt, ten = ordered[sel[ordered]], grouped[sel[grouped]]
        if mkt.size:
            clear_type(state, t, mkt, ten, price, first=first)
    won = rows[state.win_tier[rows] >= 0]
    np.subtract.at(state.budget_left, bids.tenant[won], need[won])


def mark_over_budget(state: RoundState, rows: I64, choice: NDArray[np.int32], need: I64) -> None:
    """Budget filter outcome, ARCHITECTURE.md §Clearing step 1: the first pass that refuses a bid sets its reason
    (over budget or guardrail) and figure (the hold it needed)."""
    fresh = rows[~state.over_budget[rows]]
    state.over_budget[fresh] = True
    state.reason_type[fresh] = choice[fresh]
    state.figure[fresh] = need[fresh]


def clear_type(state: RoundState, t: int, mkt: I64, ten: I64, price: I64, *, first: bool) -> None:
    """Tiers G, B, S by count, then placement and reclaim, for the admitted bids of one type."""
    book, floor = state.book, state.floor
    bids = book.bids
    unused = np.maximum(book.tenants.guarantee[:, t] - state.held_total(t), 0)
    g_rows = ten[tier_g(ten, bids.tenant, bids.gpus, unused)]
    tier = np.full(len(bids), -1, dtype=np.int8)
    tier[g_rows] = TIER_G
    supply = int(floor.free[pl.open_nodes(floor, t)].sum()) - int(bids.gpus[g_rows].sum())
    if first:
        cand = ten[(tier[ten] < 0) & (price[ten] >= book.types.posted[t])]
        b_mask, state.share[:, t] = tier_b(cand, bids.tenant, bids.gpus, book.tenants.weight, max(supply, 0))
        tier[cand[b_mask]] = TIER_B
        supply -= int(bids.gpus[cand[b_mask]].sum())
    rest = mkt[tier[mkt] < 0]
    s_mask = tier_s(rest, bids.gpus, supply)
    tier[rest[s_mask]] = TIER_S
    placed = place_all(state, t, mkt, tier)
    record(state, t, mkt, tier, placed, price, unused, spot_supply=supply)


def place_all(state: RoundState, t: int, mkt: I64, tier: NDArray[np.int8]) -> BOOL:
    """Placement, ARCHITECTURE.md §Clearing step 5: starving gangs first, then G, B, S, then every other admitted
    bid that still fits (as spot, so no GPU stays idle while a bid fits); then reclaim for unplaced G gangs."""
    floor, gpus = state.floor, state.book.bids.gpus
    placed = np.zeros(len(state.book.bids), dtype=np.bool_)
    serve_starving(state, t, mkt[tier[mkt] >= 0], placed)
    for group in (TIER_G, TIER_B, TIER_S, -1):
        rows = mkt[(tier[mkt] == group) & ~placed[mkt]]
        placed[rows[pl.place_rows(floor, t, rows, gpus)]] = True
    tier[mkt[(tier[mkt] < 0) & placed[mkt]]] = TIER_S
    g_left = mkt[(tier[mkt] == TIER_G) & ~placed[mkt]]
    g_left = g_left[np.argsort(state.book.bids.tenant[g_left], kind="stable")]  # tenant, then market order
    for row in g_left.tolist():
        if reclaim_for(state, t, row):
            placed[row] = True
            state.count("reclaimed_gangs")
        else:
            state.count("guarantee_unrestored")
    return placed


def serve_starving(state: RoundState, t: int, selected: I64, placed: BOOL) -> None:
    """No starvation, ARCHITECTURE.md §Clearing step 5: a winning gang that has waited at least
    ``starve_rounds`` is placed before everything else; if it does not fit, nodes are reserved for it."""
    book, floor = state.book, state.floor
    starving = selected[book.bids.waited[selected] >= book.policy.starve_rounds]
    starving = starving[np.argsort(-book.bids.waited[starving], kind="stable")][
        : book.policy.max_reservations
    ]
    for row in starving.tolist():
        k = int(book.bids.gpus[row])
        one = np.array([row], dtype=np.int64)
        if pl.place_rows(floor, t, one, book.bids.gpus)[0]:
            placed[row] = True
            state.count("starving_placed")
            continue
        for node in pl.reserve_for(floor, t, k).tolist():
            state.reserved_jobs.append((node, int(book.bids.job[row])))
        state.count("starving_reserved")


def record(
    state: RoundState,
    t: int,
    mkt: I64,
    tier: NDArray[np.int8],
    placed: BOOL,
    price: I64,
    unused: I64,
    *,
    spot_supply: int,
) -> None:
    """Write the winners of this type and, for the rest, the reason they lost here (docs/allocator.md)."""
    bids, book = state.book.bids, state.book
    win = mkt[placed[mkt]]
    state.win_tier[win] = tier[win]
    state.win_type[win] = t
    np.add.at(state.won, (bids.tenant[win], t), bids.gpus[win])
    spot = win[tier[win] == TIER_S]
    low = int(price[spot].min()) if spot.size else -1
    if spot.size:
        state.s_low[t] = low if state.s_low[t] < 0 else min(low, int(state.s_low[t]))
    lost = mkt[~placed[mkt]]
    if lost.size:
        state.s_lose[t] = max(int(state.s_lose[t]), int(price[lost].max()))
    lost = lost[~state.over_budget[lost]]  # an earlier refusal by the budget filter stands
    state.reason_type[lost] = t
    largest = pl.largest_fit(state.floor, t)
    p = int(book.types.posted[t])
    full = (unused[bids.tenant[lost]] < bids.gpus[lost]) & (price[lost] < p) & (spot_supply <= 0)
    cheap = (low >= 0) & (price[lost] < low)
    reason = np.where(
        tier[lost] >= 0, NO_FIT, np.where(full, GUARANTEE_FULL, np.where(cheap, OUTBID, NO_FIT))
    )
    reason = np.where((reason == NO_FIT) & (tier[lost] < 0) & (spot_supply <= 0) & ~full, OUTBID, reason)
    figure = np.where(
        reason == GUARANTEE_FULL, p, np.where(reason == NO_FIT, largest, low + 1 if low >= 0 else -1)
    )
    state.reason[lost] = reason
    state.figure[lost] = figure


__all__ = ["clear"]
