"""One clearing round, ARCHITECTURE.md §Clearing: the orchestration of the named rules.

Bids accepting several GPU types are cleared in passes: in pass j every bid still pending tries its j-th
preferred type (largest margin of limit over posted price first). Pass 0 runs every tier; later passes see only
what earlier passes left (fragments), so they run tier G and then spot (tier S) on the leftovers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from allocator import placement as pl
from allocator.book import TIER_B, TIER_G, TIER_S, Bids, Book
from allocator.reclaim import reclaim_for, retier
from allocator.result import BELOW_RESERVE, GUARANTEE_FULL, NO_FIT, OUTBID, Result
from allocator.result_build import build_result
from allocator.state import RoundState
from allocator.tiers import (
    budget_filter,
    group_by_tenant,
    limit_holds,
    market_order,
    preference_order,
    tier_b,
    tier_g_pos,
    tier_s,
)

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
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
        pending &= ~state.won_bid
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


@dataclass(frozen=True)
class Slate:
    """Bids of one pass in market order (price desc, submit time, job id): every array is indexed by position.
    ``ten`` lists the positions grouped by tenant, each tenant's bids still in market order."""

    rows: I64
    price: I64
    gpus: I32
    tenant: I32
    ten: I64
    ten_tenant: I32  # tenant[ten]: each tenant id repeated as often as it bids

    @classmethod
    def of(cls, rows: I64, price: I64, gpus: I32, tenant: I32, n_tenants: int) -> Slate:
        ten_tenant = np.repeat(np.arange(n_tenants, dtype=np.int32), np.bincount(tenant, minlength=n_tenants))
        return cls(rows, price, gpus, tenant, group_by_tenant(tenant, n_tenants), ten_tenant)

    def subset(self, pos: I64, n_tenants: int) -> Slate:
        return Slate.of(self.rows[pos], self.price[pos], self.gpus[pos], self.tenant[pos], n_tenants)

    def need(self, bids: Bids, pos: I64) -> I64:
        """Holds at the limit price of the bids at ``pos`` (the budget filter's worst case)."""
        return limit_holds(self.gpus[pos], self.price[pos], bids.max_s[self.rows[pos]])


def row_prices(bids: Bids, rows: I64, choice: NDArray[np.int32]) -> I64:
    """Limit price of every bid in the type it tries this pass (indexed by bid row; 0 outside ``rows``)."""
    if bids.limit.shape[1] == 1:
        return np.ascontiguousarray(bids.limit[:, 0])  # outside ``rows`` the price is never read
    price = np.zeros(len(bids), dtype=np.int64)
    price[rows] = bids.limit[rows, choice[rows]]
    return price


def slate_of(state: RoundState, rows: I64, price: I64) -> Slate:
    """Gather the columns of ``rows`` once, in market order."""
    bids, n_tenants = state.book.bids, len(state.book.tenants)
    order = market_order(rows, price, state.rank)
    tenant = bids.tenant[order]
    return Slate.of(order, price[order], bids.gpus[order], tenant, n_tenants)


def spend_bound(bids: Bids, rows: I64, price: I64, n_tenants: int) -> NDArray[np.float64]:
    """What each tenant's bids of this pass would hold at their limit prices, in floats (a screen only)."""
    if rows.size * 2 > len(bids):  # most bids: no gathers, zero weight outside ``rows``
        inside = np.zeros(len(bids), dtype=np.bool_)
        inside[rows] = True
        g, p, m, t = np.where(inside, bids.gpus, 0), price, bids.max_s, bids.tenant
    else:
        g, p, m, t = bids.gpus[rows], price[rows], bids.max_s[rows], bids.tenant[rows]
    out = np.asarray(np.bincount(t, weights=g * (p * (m / 3600.0)), minlength=n_tenants), dtype=np.float64)
    return out


def run_pass(state: RoundState, rows: I64, choice: NDArray[np.int32], *, first: bool) -> None:
    """One pass: budget filter over every type at once, then each type's tiers and placement."""
    bids, n_tenants, n_types = state.book.bids, len(state.book.tenants), len(state.book.types)
    price = row_prices(bids, rows, choice)
    slate = slate_of(state, rows, price)
    poor = spend_bound(bids, rows, price, n_tenants) * (1 + 1e-9) + 1 >= state.budget_left
    refused, need = budget_filter(slate, poor, lambda pos: slate.need(bids, pos), state.budget_left)
    mark_over_budget(state, slate.rows[refused], choice, need)
    keep = np.ones(slate.rows.shape[0], dtype=np.bool_)
    keep[refused] = False
    kind = choice[slate.rows] if n_types > 1 else None
    for t in range(n_types):
        part, admitted = slate, (keep if refused.size else None)
        if kind is not None:
            part, admitted = slate.subset(np.flatnonzero(keep & (kind == t)), n_tenants), None
        if part.rows.size:
            won = clear_type(state, t, part, admitted, first=first)
            if n_types > 1:  # a later pass may spend again
                state.budget_left -= sum_by(part.tenant[won], part.need(bids, won), n_tenants)


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
    fresh = ~state.over_budget[rows]
    rows = rows[fresh]
    state.over_budget[rows] = True
    state.reason_type[rows] = choice[rows]
    state.figure[rows] = need[fresh]


REFUSED = -2  # tier mark of a position the budget filter refused (it takes no part in this type)


def clear_type(state: RoundState, t: int, s: Slate, admitted: BOOL | None, *, first: bool) -> I64:
    """Tiers G, B, S by count, then placement and reclaim, for the bids of one type (``admitted``: those the
    budget filter let through, None for all); returns the positions that won."""
    book, floor = state.book, state.floor
    tt, tg = s.ten_tenant, s.gpus[s.ten]
    unused = np.maximum(book.tenants.guarantee[:, t] - state.held_total(t), 0)
    tier = np.full(s.rows.shape[0], -1, dtype=np.int8)
    if admitted is not None:
        tier[~admitted] = REFUSED
    g_pos = s.ten[:0]
    if unused.any():
        ok = unused[tt] > 0
        cand = np.flatnonzero(ok if admitted is None else ok & admitted[s.ten])
        g_pos = s.ten[cand[tier_g_pos(tt[cand], tg[cand], unused)]]
        tier[g_pos] = TIER_G
    supply = int(floor.free[pl.open_nodes(floor, t)].sum()) - int(s.gpus[g_pos].sum())
    if first:
        cand = np.flatnonzero(((tier == -1) & (s.price >= book.types.posted[t]))[s.ten])
        b_take, state.share[:, t] = tier_b(tt[cand], tg[cand], book.tenants.weight, max(supply, 0))
        b_sel = cand[b_take]
        tier[s.ten[b_sel]] = TIER_B
        supply -= int(tg[b_sel].sum())
    rest = np.flatnonzero(tier == -1)
    tier[rest[tier_s(s.gpus[rest], supply)]] = TIER_S
    placed = place_all(state, t, s, tier)
    left = unused - np.bincount(s.tenant[g_pos], weights=s.gpus[g_pos], minlength=unused.shape[0]).astype(
        np.int64
    )
    return record(state, t, s, tier, placed, left, spot_supply=supply)


def place_all(state: RoundState, t: int, s: Slate, tier: NDArray[np.int8]) -> BOOL:
    """Placement, ARCHITECTURE.md §Clearing step 5: starving gangs first, then G, B, S, then every other admitted
    bid that still fits (as spot, so no GPU stays idle while a bid fits); then reclaim for unplaced G gangs."""
    floor = state.floor
    placed = np.zeros(s.rows.shape[0], dtype=np.bool_)
    serve_starving(state, t, s, tier, placed)
    for group in (TIER_G, TIER_B, TIER_S, -1):
        pos = np.flatnonzero(tier == group)
        pos = pos[~placed[pos]]
        floor.context = (TIER_S if group < 0 else group, t)
        placed[pos[pl.place_rows(floor, t, s.rows[pos], s.gpus[pos])]] = True
    tier[(tier == -1) & placed] = TIER_S
    state.victim_cache.clear()  # entitlements of this type may have changed
    g_left = np.flatnonzero((tier == TIER_G) & ~placed)
    g_left = g_left[np.argsort(s.tenant[g_left], kind="stable")]  # tenant, then market order
    for at in g_left.tolist():
        if reclaim_for(state, t, int(s.rows[at])):
            placed[at] = True
            state.count("reclaimed_gangs")
        else:
            state.count("guarantee_unrestored")
    return placed


def serve_starving(state: RoundState, t: int, s: Slate, tier: NDArray[np.int8], placed: BOOL) -> None:
    """No starvation, ARCHITECTURE.md §Clearing step 5: a gang that has waited at least ``starve_rounds`` and
    competes (selected by a tier, or bidding at least the posted price) is placed before everything else; if it
    does not fit, nodes are reserved for it (longest wait first, at most ``max_reservations`` per type)."""
    book, floor = state.book, state.floor
    if not state.starving.any():
        return
    starving = np.flatnonzero(state.starving[s.rows])
    competitive = (tier[starving] >= 0) | (
        (tier[starving] == -1) & (s.price[starving] >= book.types.posted[t])
    )
    starving = starving[competitive]
    waited = book.bids.waited[s.rows[starving]]
    starving = starving[np.argsort(-waited, kind="stable")][: book.policy.max_reservations]
    for at in starving.tolist():
        row, k = int(s.rows[at]), int(s.gpus[at])
        floor.context = (TIER_S if tier[at] < 0 else int(tier[at]), t)
        if pl.place_one(floor, t, k, row):
            placed[at] = True
            state.count("starving_placed")
            continue
        nodes = pl.reserve_for(floor, t, k).tolist()
        state.reserved_jobs += [(node, int(book.bids.job[row])) for node in nodes]
        state.count("starving_reserved", 1 if nodes else 0)


def record(
    state: RoundState, t: int, s: Slate, tier: NDArray[np.int8], placed: BOOL, left: I64, *, spot_supply: int
) -> I64:
    """Note the winners of this type and, for the rest, the reason they lost here (docs/allocator.md).
    ``left``: each tenant's guarantee still unused after tier G. Returns the winning positions."""
    book = state.book
    win = np.flatnonzero(placed)
    state.won_bid[s.rows[win]] = True
    state.won[:, t] += np.bincount(s.tenant[win], weights=s.gpus[win], minlength=len(book.tenants)).astype(
        np.int64
    )
    spot = win[tier[win] == TIER_S]
    low = int(s.price[spot].min()) if spot.size else -1
    if low >= 0:
        state.s_low[t] = low if state.s_low[t] < 0 else min(low, int(state.s_low[t]))
    lost = np.flatnonzero(~placed & (tier != REFUSED))
    p_lost = s.price[lost]
    if lost.size:
        state.s_lose[t] = max(int(state.s_lose[t]), int(p_lost.max()))
    rows = s.rows[lost]
    if state.over_budget.any():
        keep = ~state.over_budget[rows]  # an earlier refusal by the budget filter stands
        lost, rows, p_lost = lost[keep], rows[keep], p_lost[keep]
    unsold = tier[lost] < 0
    p = int(book.types.posted[t])
    reason = np.full(lost.size, NO_FIT, dtype=np.int8)
    figure = np.full(lost.size, pl.largest_fit(state.floor, t), dtype=np.int64)
    if spot_supply <= 0:
        gfull = unsold & (left[s.tenant[lost]] < s.gpus[lost]) & (p_lost < p)
        reason[gfull], figure[gfull] = GUARANTEE_FULL, p
        reason[unsold & ~gfull], figure[unsold & ~gfull] = OUTBID, -1
    elif low >= 0:
        cheap = unsold & (p_lost <= low)
        reason[cheap], figure[cheap] = OUTBID, low + 1
    state.reason_type[rows] = t
    state.reason[rows] = reason
    state.figure[rows] = figure
    return win


__all__ = ["clear"]
