"""One clearing round, ARCHITECTURE.md §Clearing: the order of the steps, each a named rule in its own module.

Bids accepting several GPU types are cleared in passes: in pass j every bid still pending tries its j-th preferred
type (step 1). Pass 0 runs every step; later passes see only what earlier passes left, so they run tier G, tier S,
placement and guarantee reclaim (no tier B, no fair reclaim, no new reservations).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S, Book, hold_of
from allocator.fairshare import credit
from allocator.reference import consolidate as cs
from allocator.reference import placement as pl
from allocator.reference import reclaim as rc
from allocator.reference import reserve as rv
from allocator.reference.fill import group_by
from allocator.reference.order import budget_filter, market_order, preferences
from allocator.reference.state import RoundState, TypeBids, placed_gpus, placed_gpus_of
from allocator.reference.tiers import entitlement, share, tier_b, tier_g, tier_s, whole_gpus
from allocator.result import (
    BACKFILL_DUE,
    BELOW_RESERVE,
    BUSY,
    FAIR_SHARE,
    GUARANTEE_FULL,
    NO_FIT,
    OUTBID,
    RECLAIM,
)

I64 = NDArray[np.int64]
I8 = NDArray[np.int8]
F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]
REST = 3  # placement group of the bids no tier selected: they land as spot when they still fit


def clear_round(book: Book) -> RoundState:
    """Run every step of one round on ``book``; returns the finished working state (``result.build`` turns it
    into the Result)."""
    state = RoundState.start(book)
    prefs = preferences(book.bids, book.types)
    below_reserve(state, prefs)
    limit = book.bids.limit
    for j in range(prefs.shape[1]):
        choice = prefs[:, j]
        rows = np.flatnonzero((choice >= 0) & (state.won_tier < 0))
        if rows.size == 0:
            break
        if limit.shape[1] == 1:
            price = limit[:, 0]
        else:
            price = np.full(len(book.bids), -1, dtype=np.int64)
            price[rows] = limit[rows, choice[rows]]
        run_pass(state, rows, choice, price, first=j == 0)
    return state


def below_reserve(state: RoundState, prefs: NDArray[np.int32]) -> None:
    """Eligibility (step 1): a bid below the reserve of every type it accepts never wins; its figure is the lowest
    reserve among those types."""
    bids, reserve = state.book.bids, state.book.types.reserve
    rows = np.flatnonzero(prefs[:, 0] < 0)
    if rows.size:
        r = np.where(bids.limit[rows] >= 0, reserve[None, :], np.iinfo(np.int64).max)
        state.reason[rows] = BELOW_RESERVE
        state.reason_type[rows] = np.argmin(r, axis=1)
        state.figure[rows] = r.min(axis=1)


def run_pass(state: RoundState, rows: I64, choice: NDArray[np.int32], price: I64, *, first: bool) -> None:
    """One pass: the budget filter over every type at once, then each type's tiers, placement and reclaim."""
    bids = state.book.bids
    order, p_order = market_order(rows, price, state.ranks)
    refused, need = budget_filter(rows, order, price, bids, state.budget_left)
    if refused.any():
        r = order[refused]
        new = ~state.over_budget[r]
        state.over_budget[r[new]] = True
        state.reason_type[r[new]] = choice[r[new]]
        state.figure[r[new]] = need[r[new]]
        order, p_order = order[~refused], p_order[~refused]
    n_types = len(state.book.types)
    for t in range(n_types):
        mine = None if n_types == 1 else choice[order] == t
        part = order if mine is None else order[mine]
        if part.size == 0:
            continue
        won = clear_type(state, t, part, p_order if mine is None else p_order[mine], first=first)
        if n_types > 1 and won.any():  # a later pass may spend again: holds at the limit price
            r = part[won]
            hold = np.asarray(hold_of(bids.gpus[r], price[r], bids.max_s[r]), dtype=np.int64)
            state.budget_left -= np.bincount(
                bids.tenant[r], weights=hold, minlength=len(state.budget_left)
            ).astype(np.int64)


def clear_type(state: RoundState, t: int, rows: I64, price: I64, *, first: bool) -> BOOL:
    """Tiers G, B, S by count, placement, reclaim and outcomes for one type's bids (``rows``, market order, with
    their limit prices in this type, ``price``, by position). Returns the placed mask by position."""
    bids = state.book.bids
    s = TypeBids(
        rows,
        price,
        bids.tenant[rows],  # int32 columns: gathered, not widened
        bids.gpus[rows],
        np.full(rows.shape[0], -1, dtype=np.int8),
        np.zeros(rows.shape[0], dtype=np.bool_),
    )
    unused = np.maximum(state.book.tenants.guarantee[:, t] - state.holding(t), 0)
    g = tier_g(s.tenant, s.gpus, unused)
    s.tier[g] = TIER_G
    left = unused - np.bincount(s.tenant[g], weights=s.gpus[g], minlength=unused.shape[0]).astype(np.int64)
    supply = state.floor.free_open(t) - int(s.gpus[g].sum())
    if first:
        supply -= select_tier_b(state, t, s, g)
    spot_supply = supply
    open_ = np.flatnonzero(s.tier < 0)
    s.tier[open_[tier_s(s.gpus[open_], supply)]] = TIER_S
    if first:
        serve_head(state, t, s)
    place_groups(state, t, s)
    guarantee_on_reserved(state, t, s)
    gained = placed_gpus(s, unused.shape[0])  # by tenant, GPUs placed so far in this type and pass
    reclaim_guarantees(state, t, s, gained)
    if first and state.book.policy.fair_reclaim:
        fair_reclaim(state, t, s, gained)
    before = s.placed.copy()
    serve_backfill(state, t, s)
    gained += placed_gpus_of(s, s.placed & ~before, unused.shape[0])
    record(state, t, s, left, spot_supply, gained, first=first)
    return s.placed


def select_tier_b(state: RoundState, t: int, s: TypeBids, g: BOOL) -> int:
    """Tier B (step 3) on this type's bids at or above p not in tier G; notes the entitlements. Returns the GPUs
    it took."""
    book = state.book
    q, weight = book.tenants.guarantee[:, t].astype(np.int64), book.tenants.weight
    held = state.holding(t) + np.bincount(s.tenant[g], weights=s.gpus[g], minlength=q.shape[0]).astype(
        np.int64
    )
    at_p = np.flatnonzero((s.price >= book.types.posted[t]) & ~g)
    pending = np.bincount(s.tenant[at_p], weights=s.gpus[at_p], minlength=q.shape[0]).astype(np.int64)
    c = credit(book, t)
    e = whole_gpus(entitlement(held, q, pending, weight, int(state.schedulable[t]), c))
    state.entitled[:, t] = e
    supply = state.floor.free_open(t) - int(s.gpus[g].sum())
    b = tier_b(s.tenant[at_p], s.gpus[at_p], e, np.maximum(held - q, 0), weight, supply, c)
    s.tier[at_p[b]] = TIER_B
    return int(s.gpus[at_p[b]].sum())


def serve_head(state: RoundState, t: int, s: TypeBids) -> None:
    """The head of the line (step 5, reserve.py): gangs of tenants the fair-share history says are owed
    (``fairshare.credit`` > 0) that fit no node now, and gangs that waited ``starve_rounds`` (whatever their
    price), most owed first (lowest ``tiers.share``), then longest wait, then market order; at most
    ``max_reservations`` of them per type. A starving gang that fits is placed before everything else; one that
    does not is placed by moving a few running jobs where that makes room at once (``consolidate``), else gets
    the nodes that drain soonest reserved (at most ``max_reserved_pct`` of the type's nodes), and
    once due (expected start reached) it preempts on them what backfill let in and ran past its prediction."""
    book, floor = state.book, state.floor
    policy = book.policy
    rows = s.rows
    waited = book.bids.waited[rows]
    c = credit(book, t)
    blocked = s.gpus > pl.largest_fit(floor, t)
    starving = waited >= policy.starve_rounds
    at = np.flatnonzero(starving | ((c[s.tenant] > 0) & blocked & ~s.placed))
    if at.size == 0 or policy.max_reservations == 0:
        return
    q = book.tenants.guarantee[:, t].astype(np.int64)
    standing = share(np.maximum(state.holding(t) - q, 0).astype(np.float64), book.tenants.weight, c)
    owed = c[s.tenant[at]] > 0
    at = at[np.lexsort((at, -waited[at], np.where(owed, standing[s.tenant[at]], np.inf)))]
    limit = max(1, floor.type_nodes[t].size * policy.max_reserved_pct // 100)
    served = 0
    for i in at.tolist():
        if served >= policy.max_reservations:
            break
        row, k, job = int(rows[i]), int(s.gpus[i]), int(book.bids.job[rows[i]])
        tier = TIER_S if s.tier[i] < 0 else int(s.tier[i])
        if pl.place_one(floor, t, k, row, tier):
            s.placed[i], s.tier[i] = True, tier
            state.count("starving_placed")
            served += 1
            continue
        nodes, start = rv.drain_soonest(floor, book, t, k, job, limit, state.frees)
        wait_cost = k * max(0, min(start, rv.NEVER) - book.now) if nodes.size else rv.NEVER
        if consolidate(state, t, (row, k, int(s.tenant[i]), job), tier, wait_cost):
            s.placed[i], s.tier[i] = True, tier
            served += 1
            continue
        if nodes.size == 0:
            continue
        rv.mark_reserved(floor, nodes, job, start)
        served += 1
        state.count("starving_reserved")
        if start <= book.now and claim_due(state, t, (row, k, int(s.tenant[i]), job), tier):
            s.placed[i], s.tier[i] = True, tier


def consolidate(
    state: RoundState, t: int, gang: tuple[int, int, int, int], tier: int, wait_cost: int
) -> bool:
    """Consolidation (step 5, reference/consolidate.py): when moving a few running jobs elsewhere makes room for
    the gang at once, within the round's move budget, and costs less than waiting (``consolidate.cheaper``:
    what the moves throw away and spend restarting against the gang's GPUs idle until its nodes drain,
    ``wait_cost`` GPU-seconds), move them and place the gang; every moved job is placed again in the same round
    or nothing moves."""
    book = state.book
    budget = book.policy.max_moves - len(state.moved.rows)
    if budget <= 0:
        return False
    row, k, claimant, job = gang
    plan = cs.plan(book, state.floor, state.pre, t, k, claimant, job, budget)
    if plan is None or not cs.cheaper(book, plan, wait_cost):
        return False
    cs.apply(book, state.floor, state.pre, t, (row, k, job), plan, tier, state.moved)
    state.count("moved_leases", len(plan.moves))
    state.count("consolidated_gangs")
    return True


def claim_due(state: RoundState, t: int, gang: tuple[int, int, int, int], tier: int) -> bool:
    """A reserved gang that is due takes its nodes back from backfilled jobs running past their prediction
    (``reserve.due_victims``), preempting them (``BACKFILL_DUE``) but never below their tenant's guarantee, and
    is placed there."""
    p, book = state.pre, state.book
    victims = rv.due_victims(book, state.floor, gang[3], p.preempted)
    if not victims:
        return False
    q, held = book.tenants.guarantee[:, t], state.holding(t)

    def may_take(v: int, taken: int) -> bool:  # never below the victim's own guarantee (step 6)
        victim = int(book.leases.tenant[v])
        return bool(held[victim] - taken - p.gpus[v] >= q[victim])

    if rc.preempt_gang(p, state.floor, t, gang, victims, may_take, BACKFILL_DUE, tier):
        state.count("backfill_overran", sum(1 for v in victims if p.preempted[v]))
        return True
    return False


def serve_backfill(state: RoundState, t: int, s: TypeBids) -> None:
    """Backfill (step 5, ``reserve.backfill``): what is still unplaced, tier G, B, S, then the rest, each in market
    order, may start on reserved nodes when predicted to end before the gang is due (in tier S at most)."""
    if not state.floor.reserved_for:
        return
    pos = np.flatnonzero(~s.placed)
    if pos.size == 0:
        return
    group = np.where(s.tier[pos] < 0, REST, s.tier[pos])
    pos = pos[np.argsort(group, kind="stable")]  # market order within a group: a raised bid only moves ahead
    ok = rv.backfill(state.floor, state.book, t, s.rows[pos], s.tier[pos])
    if ok.any():
        s.placed[pos[ok]] = True
        s.tier[pos[ok]] = np.where(
            (s.tier[pos[ok]] < 0) | (s.tier[pos[ok]] == TIER_G), TIER_S, s.tier[pos[ok]]
        )
        state.count("backfilled_gangs", int(ok.sum()))
        state.count("backfilled_gpus", int(s.gpus[pos[ok]].sum()))


def place_groups(state: RoundState, t: int, s: TypeBids) -> None:
    """Placement (step 5): tier G, then B, then S, then every other admitted bid that still fits (as spot, so no
    GPU stays idle while a bid fits); in each group the largest gangs first, each size in market order."""
    floor = state.floor
    for g in (TIER_G, TIER_B, TIER_S, REST):
        if floor.free_open(t) == 0:
            return
        pos = np.flatnonzero((s.tier < 0 if g == REST else s.tier == g) & ~s.placed)
        if pos.size == 0:
            continue
        size = s.gpus[pos]
        pos = pos[np.argsort(-size.astype(np.int16), kind="stable")]  # largest first, market order within
        tier = TIER_S if g == REST else g
        for k, a, b in size_runs(size):
            if floor.free_open(t) < k:
                continue
            run = pos[a:b]
            if k > floor.max_cap[t]:
                ok = np.array(
                    [pl.place_one(floor, t, k, int(s.rows[i]), tier) for i in run.tolist()], dtype=bool
                )
            else:
                ok = pl.best_fit(floor, t, k, s.rows[run], tier)
            s.placed[run[ok]] = True
            s.tier[run[ok]] = tier


def guarantee_on_reserved(state: RoundState, t: int, s: TypeBids) -> None:
    """A guarantee comes first (step 2): a tier-G gang of a node or less that no open node holds takes a node
    reserved for another gang, best fit; that gang waits longer. (Before reclaim, so nothing is preempted for a
    guarantee that free GPUs could hold.)"""
    floor = state.floor
    if not floor.reserved_for:
        return
    pos = np.flatnonzero((s.tier == TIER_G) & ~s.placed & (s.gpus <= floor.max_cap[t]))
    reserved = np.array(sorted(n for n in floor.reserved_for if floor.nodes.gpu_type[n] == t), dtype=np.int64)
    if pos.size == 0 or reserved.size == 0:
        return
    for i in pos[np.argsort(-s.gpus[pos].astype(np.int64), kind="stable")].tolist():
        k = int(s.gpus[i])
        cand = reserved[floor.free[reserved] >= k]
        if cand.size == 0:
            continue
        node = int(cand[np.lexsort((cand, floor.free[cand]))[0]])
        one = np.array([s.rows[i]], dtype=np.int64)
        floor.record(one, np.array([node]), np.array([k], dtype=np.int64), one * 0, TIER_G, t)
        s.placed[i] = True
        state.count("guarantee_on_reserved")


def size_runs(size: NDArray[np.integer[Any]]) -> list[tuple[int, int, int]]:
    """For gangs sorted by size, largest first: each size present with where its run starts and ends."""
    count = np.bincount(size)[::-1]  # by size, largest first
    ends = np.cumsum(count)
    top = count.shape[0] - 1
    return [(top - i, int(ends[i] - count[i]), int(ends[i])) for i in np.flatnonzero(count).tolist()]


def reclaim_guarantees(state: RoundState, t: int, s: TypeBids, gained: I64) -> None:
    """Reclaim (step 6): each unplaced tier-G gang (by tenant, then market order) preempts tier S, then tier B
    leases of the tenant furthest above its entitlement, never below the victim's own guarantee: on one node, or
    for a gang larger than a node on whole nodes of one domain; where a gang of a tenant fails, no larger one of
    it is tried."""
    pos = np.flatnonzero((s.tier == TIER_G) & ~s.placed)
    if pos.size == 0:
        return
    book, p = state.book, state.pre
    pos = pos[group_by(s.tenant[pos])]
    q = book.tenants.guarantee[:, t]
    failed: dict[int, int] = {}
    held, order = p.held[:, :, t].sum(axis=1), rc.victim_order(p, t, above_entitlement(state, t))
    for i in pos.tolist():
        m, k, row = int(s.tenant[i]), int(s.gpus[i]), int(s.rows[i])
        if failed.get(m, k + 1) <= k:
            state.count("guarantee_unrestored")
            continue

        def may_take(v: int, taken: int, held: I64 = held) -> bool:
            victim = int(book.leases.tenant[v])
            return bool(held[victim] - taken - p.gpus[v] >= q[victim])

        gang = (row, k, m, int(book.bids.job[row]))
        if rc.preempt_gang(p, state.floor, t, gang, order, may_take, RECLAIM, TIER_G):
            s.placed[i] = True
            gained[m] += k
            state.count("reclaimed_gangs")
            # holdings changed: who stands furthest above its entitlement may too
            held, order = p.held[:, :, t].sum(axis=1), rc.victim_order(p, t, above_entitlement(state, t))
        else:
            failed[m] = min(failed.get(m, k), k)
            state.count("guarantee_unrestored")


def above_entitlement(state: RoundState, t: int) -> F64:
    """By tenant: excess held of type ``t`` less its entitlement (how far above it the tenant is)."""
    q = state.book.tenants.guarantee[:, t]
    return np.asarray(
        np.maximum(state.holding(t) - q, 0) - np.floor(state.entitled[:, t] + 1e-9), dtype=np.float64
    )


def fair_reclaim(state: RoundState, t: int, s: TypeBids, gained: I64) -> None:
    """Fair reclaim (step 6, an admin policy): a tenant below its entitlement by at least one of its pending gangs
    (unplaced, at or above p) preempts tier S, then tier B leases of tenants above their entitlement, past the
    minimum runtime, only while the victim's tenant stays at or above its own entitlement and at or above the
    share (excess less the fair-share history's credit, per weight: ``tiers.share``) the claimant reaches,
    counting all it gives up for the gang; never a tier G lease.
    The gang lands in tier B, as guarantee reclaim places it: on one node, or for a gang larger than a node on
    whole nodes of one domain. Claimants furthest below their share first; a tenant's gangs in its own order;
    where one fails, no larger one."""
    book, p = state.book, state.pre
    posted = int(book.types.posted[t])
    q = book.tenants.guarantee[:, t].astype(np.int64)
    weight = book.tenants.weight
    ent = np.floor(state.entitled[:, t] + 1e-9)
    ls = book.leases
    x = np.maximum(state.holding(t) + gained - q, 0).astype(np.float64)
    if not ((ls.gpu_type == t) & ~p.preempted & (x[ls.tenant] - p.gpus >= ent[ls.tenant])).any():
        return  # nobody could give anything up
    pending = np.flatnonzero(~s.placed & (s.price >= posted))
    short = ent - x
    c_t = credit(book, t)
    claimants = np.unique(s.tenant[pending][s.gpus[pending] <= short[s.tenant[pending]]])
    claimants = claimants[np.lexsort((claimants, share(x, weight, c_t)[claimants]))]
    for c in claimants.tolist():
        failed = None
        for i in pending[s.tenant[pending] == c].tolist():
            k = int(s.gpus[i])
            if k > ent[c] - x[c] or (failed is not None and k >= failed):
                continue

            def may_take(v: int, taken: int, c: int = c, k: int = k, x: F64 = x) -> bool:
                m = int(ls.tenant[v])
                after = x[m] - taken - int(p.gpus[v])
                mine = (after - c_t[m]) / weight[m]
                return bool(after >= ent[m] and mine >= (x[c] + k - c_t[c]) / weight[c])

            order = rc.victim_order(p, t, x - ent)
            gang = (int(s.rows[i]), k, c, int(book.bids.job[s.rows[i]]))
            if rc.preempt_gang(p, state.floor, t, gang, order, may_take, FAIR_SHARE, TIER_B):
                s.placed[i], s.tier[i] = True, TIER_B
                state.count("fair_reclaimed_gangs")
                gained[c] += k
                x = np.maximum(state.holding(t) + gained - q, 0).astype(np.float64)
            else:
                failed = k


def record(
    state: RoundState, t: int, s: TypeBids, left: I64, spot_supply: int, gained: I64, *, first: bool
) -> None:
    """Outcomes of one type in one pass: winners are noted; every other bid gets the reason it lost here (unless
    refused by the budget filter in an earlier pass) with its figure (docs/allocator.md, reasons): chosen by a
    tier but not placed, or priced to win with no node left: no node fits (figure: the largest gang that could
    still land). Else, where tiers G and B took every GPU: guarantee full and below p (figure p) when its
    tenant's unused guarantee is short of the gang, else busy (-1: no spot GPU was left and no bid outbid it;
    this was reported as outbid with no figure before). Else outbid when at or below the lowest winning spot
    price (figure: that price + 1)."""
    posted = int(state.book.types.posted[t])
    won = s.rows[s.placed]
    state.won_tier[won] = s.tier[s.placed]
    state.won_type[won] = t
    state.won[:, t] += gained
    spot = s.placed & (s.tier == TIER_S)
    low = int(s.price[spot].min()) if spot.any() else -1
    if low >= 0:
        state.s_low[t] = low if state.s_low[t] < 0 else min(low, int(state.s_low[t]))
    lost = ~s.placed
    if not lost.any():
        return
    state.s_lose[t] = max(int(state.s_lose[t]), int(s.price[lost].max()))
    # a bid refused by the budget filter in an earlier pass keeps that reason (in pass 0 none is: refused bids
    # never reach a type)
    at = np.flatnonzero(lost if first else lost & ~state.over_budget[s.rows])
    price, unsold = s.price[at], s.tier[at] < 0
    reason = np.full(at.size, NO_FIT, dtype=np.int8)
    figure = np.full(at.size, pl.largest_fit(state.floor, t), dtype=np.int64)
    if spot_supply <= 0:
        full = unsold & (left[s.tenant[at]] < s.gpus[at]) & (price < posted)
        reason[unsold] = np.where(full[unsold], GUARANTEE_FULL, BUSY)
        figure[unsold] = np.where(full[unsold], posted, -1)
    elif low >= 0:
        out = unsold & (price <= low)
        reason[out], figure[out] = OUTBID, low + 1
    rows = s.rows[at]
    state.reason[rows], state.reason_type[rows], state.figure[rows] = reason, t, figure
