"""One clearing round, ARCHITECTURE.md §Clearing: the orchestration of the named rules.

Bids accepting several GPU types are cleared in passes: in pass j every bid still pending tries its j-th
preferred type (largest margin of limit over posted price first). Pass 0 runs every tier; later passes see only
what earlier passes left (fragments), so they run tier G and then spot (tier S) on the leftovers.

Large books are cleared on a slate (an exact shortcut, docs/allocator.md "Speed"): in a type with at least
``PRUNE_MIN`` bids, the tiers and placement run on the bids at or above a price θ (never above p where tier B
runs, so tier B sees every candidate); tier G goes on below θ for the tenants it leaves short, and its winners
there join the slate. Bids below θ lose; their reason and figure come from the same vectorised rules as every
loser's, in bid-row order. The shortcut stands only where it provably changes nothing: tier S must not end with
room that a bid below θ would fill, and in the final fill no gang size may run out while a gang of that size
below θ would still land. Otherwise the type is cleared again with every bid, from a mark of the floor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from allocator import placement as pl
from allocator.book import TIER_G, TIER_S, Bids, Book
from allocator.jit import keep_freed_memory
from allocator.kernels import (
    below_reserve,
    counting_order,
    keep_rows,
    note_outcomes,
    pass_columns,
    placement_keys,
    sold_out_split,
    spend_holds,
    split_by_type,
    split_rows,
    starving_order,
    unused_guarantee,
)
from allocator.reclaim import lease_columns, reclaim_for, retier
from allocator.result import Result
from allocator.result_build import build_result
from allocator.segments import cumsum64
from allocator.settle import NOT_TAKEN, settle_type
from allocator.state import RoundState
from allocator.tiers import (
    budget_filter,
    market_columns,
    market_order,
    preference_order,
    sort_keys,
    tier_b,
    tier_g,
    tier_s,
)

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]

PRUNE_MIN = 1 << 15  # a type with fewer bids in a pass is cleared whole, without a slate
PRUNE_DEPTH = 1.25  # the slate reaches down to where the GPUs asked are this many times the GPUs left to sell
PRUNE_SLACK = 4096  # ... plus this many GPUs, so that the final fill rarely runs short of small gangs
SOLD_OUT = True  # take the sold-out shortcuts (``sold_out``, ``place_all``'s ``room``); off only in tests
SETTLE = True  # clear a type wholly on its slate in one compiled call (``settle``); off only in tests


def clear(book: Book) -> Result:
    """Clear one round: a pure function of the book; the same book gives the same result, byte for byte."""
    keep_freed_memory()
    state = RoundState.start(book)
    retier(state)
    prefs = preference_order(book.bids, book.types)
    n, limit, one = len(book.bids), book.bids.limit, prefs.shape[1] == 1
    # by bid row, the type tried this pass and the limit price there; with one type, the columns themselves
    choice = prefs[:, 0] if one else np.empty(n, dtype=np.int32)
    for j in range(prefs.shape[1]):
        rows = np.empty(n, dtype=np.int64)
        price = np.ascontiguousarray(limit[:, 0]) if one else np.empty(n, dtype=np.int64)
        written = (_NO_CHOICE, _NO_PRICE) if one else (choice, price)
        m = pass_columns(prefs, j, limit, state.won_bid, rows, *written)
        if j == 0:
            mark_below_reserve(state, choice)
        if m == 0:
            break
        run_pass(state, rows[:m], choice, price, first=j == 0)
    return build_result(state)


_NO_CHOICE = np.zeros(0, dtype=np.int32)  # pass_columns writes no choice (one type); written never
_NO_PRICE = np.zeros(0, dtype=np.int64)  # nor price


def mark_below_reserve(state: RoundState, first: I32) -> None:
    """Eligibility, ARCHITECTURE.md §Clearing step 1: a bid below the reserve price of every type it accepts
    (no type to try first) never wins; its figure is the lowest reserve among those types
    (``kernels.below_reserve``)."""
    notes = (state.reason, state.reason_type, state.figure)
    below_reserve(first, state.book.bids.limit, state.book.types.reserve, notes)


@dataclass(frozen=True)
class Slate:
    """Bids of one type in market order (price desc, submit time, job id): every array is indexed by position."""

    rows: I64
    price: I64
    gpus: I32
    tenant: I32


def drop(rows: I64, gone: I64, n: int) -> I64:
    """``rows`` (ascending, below ``n``) without ``gone`` (any order)."""
    if gone.size == 0:
        return rows
    keep = np.ones(n, dtype=np.bool_)
    keep[gone] = False
    out = np.empty(rows.shape[0], dtype=np.int64)
    return out[: keep_rows(rows, keep, out)]


def by_type(rows: I64, choice: I32, n_types: int) -> list[I64]:
    """``rows`` (ascending) split by the type each tries this pass, each part still ascending."""
    if n_types == 1:
        return [rows]
    grouped = np.empty(rows.shape[0], dtype=np.int64)
    bounds = split_by_type(rows, choice, n_types, grouped).tolist()
    return [grouped[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def run_pass(state: RoundState, rows: I64, choice: I32, price: I64, *, first: bool) -> None:
    """One pass over the bid rows ``rows`` (ascending; ``choice`` and ``price``: the type each tries and its
    limit there, by bid row): budget filter over every type at once, then each type's tiers and placement."""
    bids, n_types = state.book.bids, len(state.book.types)
    noted = (state.over_budget, state.reason_type, state.figure)
    refused = budget_filter(rows, price, state.ranks, bids, state.budget_left, choice, noted)
    rows = drop(rows, refused, len(bids))
    for t, part in enumerate(by_type(rows, choice, n_types)):
        if part.size == 0:
            continue
        won = clear_type(state, t, part, price, first=first)
        if n_types > 1 and won.size:  # a later pass may spend again
            spend_holds(won, (bids.tenant, bids.gpus, bids.max_s), price, state.budget_left)


def clear_type(state: RoundState, t: int, rows: I64, price: I64, *, first: bool) -> I64:
    """Tiers G, B, S by count, then placement and reclaim, for the bids of one type (``rows``, ascending: those
    the budget filter let through); returns the bid rows that won."""
    book, floor = state.book, state.floor
    unused = np.empty(len(book.tenants), dtype=np.int64)
    n_unused = unused_guarantee(book.tenants.guarantee, state.held, state.won, t, unused)
    free = pl.free_open(floor, t)
    if free == 0 and not first and SOLD_OUT:
        rows = sold_out(state, t, rows, price, unused)
        if rows.size == 0:
            return rows
    theta = slate_price(state, t, rows, price, free - n_unused, first=first)
    if theta is not None:
        won = clear_slate(state, t, rows, price, unused, free, theta, first=first)
        if won is not None:
            return won
    won = clear_slate(state, t, rows, price, unused, free, None, first=first)
    assert won is not None
    return won


def sold_out(state: RoundState, t: int, rows: I64, price: I64, unused: I64) -> I64:
    """A later pass (no tier B) in a type with no GPU free on its open nodes: only tier G (by reclaim) and a
    starving gang (by reservation) can still do anything, so only the bids that could be either go on, the
    bids of the tenants whose unused guarantee holds them (tier G fits no larger gang: what is unused only
    shrinks) and starving ones. The others lose here; ``kernels.sold_out_split`` notes them as
    ``note_outcomes`` would have (tier S has no supply, nothing is placed but by reclaim). The same outcome
    as clearing every bid: in the benchmark's later passes, 5% of the bids went on at 10^4 bids, 0.1% at 10^6."""
    bids = state.book.bids
    rest = np.empty(rows.shape[0], dtype=np.int64)
    notes = (state.over_budget, state.reason, state.reason_type, state.figure)
    posted = int(state.book.types.posted[t])
    n, lose = sold_out_split(
        rows, (price, bids.tenant, bids.gpus), unused, state.starving, notes, t, posted, rest
    )
    if lose >= 0:
        state.s_lose[t] = max(int(state.s_lose[t]), lose)
    return rest[:n]


def slate_price(state: RoundState, t: int, rows: I64, price: I64, supply: int, *, first: bool) -> int | None:
    """θ, the lowest price on the slate (None: no slate, every bid). Estimated from a sample of the bids as the
    price down to which the GPUs asked reach ``PRUNE_DEPTH`` times ``supply`` plus ``PRUNE_SLACK``; never above
    p where tier B runs, nor above p where a starving gang bids at least p (it competes for reserved nodes)."""
    if rows.size < PRUNE_MIN:
        return None
    bids = state.book.bids
    step = max(1, rows.size // 8192)
    sample = rows[::step]
    p_s, g_s = by_price_desc(price[sample], bids.gpus[sample])
    reach = cumsum64(g_s) * step
    at = int(np.searchsorted(reach, PRUNE_DEPTH * max(supply, 0) + PRUNE_SLACK))
    if at >= p_s.shape[0]:
        return None
    theta = int(p_s[at])
    p = int(state.book.types.posted[t])
    if theta > p and (first or (state.any_starving and (state.starving[rows] & (price[rows] >= p)).any())):
        theta = p
    return theta


def by_price_desc(p: I64, gpus: I32) -> tuple[I64, I64]:
    """Prices ``p`` sorted descending, with the gang sizes in the same order (among equal prices in any order:
    θ is the price where the GPUs asked reach a mark, the same whichever order ties take). One sort of packed
    (price, size) values where they fit 62 bits: a stable argsort of 8,192 prices took 370 us, this 40."""
    top, low, g_max = int(p.max()), int(p.min()), int(gpus.max())
    g_bits = max(1, g_max.bit_length())
    if (top - low).bit_length() + g_bits > 62 or int(gpus.min()) < 0:
        order = np.argsort(-p)
        return p[order], gpus[order].astype(np.int64)
    key = np.subtract(top, p, dtype=np.int64)
    key <<= g_bits
    key |= gpus
    sort_keys(key, 0, (top - low).bit_length() + g_bits)
    g_s = key & ((1 << g_bits) - 1)
    key >>= g_bits
    return np.subtract(top, key, dtype=np.int64), g_s


def tier_g_below(state: RoundState, below: I64, price: I64, left: I64) -> I64:
    """Tier G, ARCHITECTURE.md §Clearing step 2, below the slate: the tenants the slate leaves short of their
    guarantee (``left``, spent in place) go on first-fitting their bids below the slate (``below``), which
    come after in their order. Returns the selected bid rows."""
    bids = state.book.bids
    more = np.compress(bids.gpus[below] <= left[bids.tenant[below]], below)  # larger ones can never fit
    if more.size == 0:
        return more
    more, _ = market_order(more, price, state.ranks)
    tier = np.full(more.shape[0], -1, dtype=np.int8)
    tier_g(tier, bids.tenant[more], bids.gpus[more], left)
    return np.compress(tier == TIER_G, more)


def clear_slate(
    state: RoundState,
    t: int,
    rows: I64,
    price: I64,
    unused: I64,
    free: int,
    theta: int | None,
    *,
    first: bool,
) -> I64 | None:
    """The tiers, placement and reclaim on the slate: the bids at or above ``theta`` (None: every bid) and the
    tier-G winners below it. Returns the winning rows, or None (and nothing changed) when the bids below
    ``theta`` would have changed the outcome."""
    book, floor, bids = state.book, state.floor, state.book.bids
    slate, below = rows, None
    if theta is not None:
        high, low = np.empty(rows.shape[0], dtype=np.int64), np.empty(rows.shape[0], dtype=np.int64)
        n_high = split_rows(rows, price, theta, high, low)
        slate, below = high[:n_high], low[: rows.shape[0] - n_high]
        if below.size == 0:
            slate, below = rows, None
    s = Slate(*market_columns(slate, price, state.ranks, bids.gpus, bids.tenant))
    if below is None and SETTLE:
        won = settle(state, t, s, price, unused, free, first=first)
        if won is not None:
            return won
    tier = np.full(s.rows.shape[0], -1, dtype=np.int8)
    left = unused.copy()  # each tenant's guarantee still unused, spent by tier G
    supply = free - tier_g(tier, s.tenant, s.gpus, left)
    g_below = tier_g_below(state, below, price, left) if below is not None and left.any() else None
    if g_below is not None and g_below.size:  # they come after every slate bid in market order
        assert below is not None
        extra, extra_price = market_order(g_below, price, state.ranks)
        order, price_s = np.concatenate([s.rows, extra]), np.concatenate([s.price, extra_price])
        s = Slate(order, price_s, bids.gpus[order], bids.tenant[order])
        tier = np.concatenate([tier, np.full(extra.shape[0], TIER_G, dtype=np.int8)])
        supply -= int(bids.gpus[extra].sum())
        below = drop(below, g_below, len(bids))
        if below.size == 0:
            below = None
    p = int(book.types.posted[t])
    if first:
        at_p = int(np.searchsorted(-s.price, -p, side="right"))  # positions priced at or above p
        taken, state.share[:, t] = tier_b(tier, at_p, s.tenant, s.gpus, book.tenants.weight, max(supply, 0))
        supply -= taken
    spare = tier_s(tier, s.gpus, supply)
    if below is not None and spare > 0 and int(bids.gpus[below].min()) <= spare:
        return None
    mark = floor.mark() if below is not None else None
    counters, n_reserved = dict(state.counters), len(state.reserved_jobs)
    room = free > 0 or not SOLD_OUT
    placed = place_all(state, t, s, tier, None if below is None else _sizes_in(bids, below), room=room)
    if placed is None:
        assert mark is not None
        floor.rewind(mark)
        state.counters = counters
        del state.reserved_jobs[n_reserved:]
        return None
    return record(state, t, s, tier, placed, below, price, left, spot_supply=supply, room=room)


def settle(
    state: RoundState, t: int, s: Slate, price: I64, unused: I64, free: int, *, first: bool
) -> I64 | None:
    """The whole type on the slate: the tiers, placement, reclaim and outcomes in one compiled call
    (``settle.settle_type``, the same steps as below). None (nothing changed) when a gang is larger than every
    node of the type: whole-node placement is done step by step."""
    book, floor, bids = state.book, state.floor, state.book.bids
    n = s.rows.shape[0]
    tier, placed, won = (
        np.full(n, -1, dtype=np.int8),
        np.zeros(n, dtype=np.bool_),
        np.empty(n, dtype=np.int64),
    )
    reserved = state.reserved_jobs
    status, floor.entries, counts, new_reserved, gone = settle_type(
        (s.rows, s.price, s.gpus, s.tenant),
        (tier, placed, won),
        (
            t,
            first,
            int(book.types.posted[t]),
            free,
            free > 0 or not SOLD_OUT,
            book.policy.max_reservations,
            state.any_starving,
        ),
        (unused, book.tenants.weight, state.share, state.won),
        (price, bids.tenant, bids.gpus, bids.job, state.starving, bids.waited),
        (
            floor.type_nodes[t],
            floor.free,
            floor.reserved,
            floor.touched,
            floor.initial_free,
            book.nodes.capacity,
            book.nodes.domain,
            int(floor.max_cap[t]),
        ),
        (floor.log_row, floor.log_node, floor.log_count, floor.log_offset, floor.log_tier, floor.log_type),
        floor.entries,
        (np.array([r[0] for r in reserved], np.int64), np.array([r[1] for r in reserved], np.int64))
        if reserved
        else _NO_RESERVED,
        lease_columns(book.leases),
        (book.now, book.policy.min_runtime_s),
        (
            state.lease_tier,
            state.preempted,
            state.preempted_for,
            state.held,
            book.tenants.guarantee,
            state.reclaim_failed,
        ),
        book.nodes.free,
        (state.won_bid, state.over_budget, state.reason, state.reason_type, state.figure),
        (state.s_low, state.s_lose),
    )
    if status == NOT_TAKEN:
        return None
    floor.context = (TIER_G, t)  # as the step-by-step path leaves it
    if new_reserved.shape[0]:
        state.reserved_jobs.extend((int(node), int(job)) for node, job in new_reserved.tolist())
    for name, by in zip(_SETTLE_COUNTS, counts, strict=True):
        if by:
            state.count(name, by)
    g_rows, node, slots = gone
    if counts[2]:  # gangs placed by reclaim, on GPUs freed by preemption: one batch, as reclaim.reclaim_for
        ok = node >= 0
        rows = np.compress(ok, g_rows)
        floor.record_explicit(rows, np.compress(ok, node), slots[ok], bids.gpus[rows].astype(np.int64))
    return won[:status]


_NO_RESERVED = (np.zeros(0, np.int64), np.zeros(0, np.int64))
_SETTLE_COUNTS = ("starving_placed", "starving_reserved", "reclaimed_gangs", "guarantee_unrestored")


def _sizes_in(bids: Bids, below: I64) -> Callable[[], BOOL]:
    """``spill()`` for placement: by gang size, whether some bid left off the slate asks for that many GPUs."""

    def spill() -> BOOL:
        return np.asarray(np.bincount(bids.gpus[below]) > 0, dtype=np.bool_)

    return spill


def place_all(
    state: RoundState, t: int, s: Slate, tier: I8, spill: Callable[[], BOOL] | None, *, room: bool
) -> BOOL | None:
    """Placement, ARCHITECTURE.md §Clearing step 5: starving gangs first, then G, B, S, then every other admitted
    bid that still fits (as spot, so no GPU stays idle while a bid fits); then reclaim for unplaced G gangs.
    None when the final fill would have reached bids off the slate (``spill``). Without ``room`` (no GPU of
    the type free on an open node) nothing can land but by reclaim, and the groups are not walked."""
    floor = state.floor
    placed = np.zeros(s.rows.shape[0], dtype=np.bool_)
    done = serve_starving(state, t, s, tier, placed, room=room)
    if room:
        order, start, stride = placement_order(tier, s.gpus, done)
        sizes = np.zeros(0, dtype=np.bool_) if spill is None else spill()
        if not pl.place_groups(floor, t, (order, start, stride), s.rows, placed, sizes):
            return None
        tier[np.flatnonzero((tier == -1) & placed)] = TIER_S
        g_left = np.sort(order[start[0] : start[stride]])
        g_left = g_left[~placed[g_left]]
    else:
        g_left = np.flatnonzero(tier == TIER_G)  # nothing was placed (serve_starving had no room either)
    floor.context = (TIER_G, t)  # reclaimed gangs are placed as tier G of this type
    g_left = g_left[np.argsort(s.tenant[g_left], kind="stable")]  # tenant, then market order
    if g_left.size:
        restored = reclaim_for(state, t, s.rows[g_left])
        placed[g_left[restored]] = True
        state.count("reclaimed_gangs", int(restored.sum()))
        state.count("guarantee_unrestored", int((~restored).sum()))
    return placed


def placement_order(tier: I8, gpus: I32, done: I64) -> tuple[I64, I64, int]:
    """Slate positions in placement order: by group (tier G, B, S, then the rest), each by gang size, largest
    first, each size in market order, leaving out ``done`` (placed already); one counting sort of the keys
    group * stride + stride - 1 - size. Returns the order, where each key starts in it, and the stride."""
    stride = int(gpus.max(initial=0)) + 1
    key, order = np.empty(tier.shape[0], dtype=np.int64), np.empty(tier.shape[0], dtype=np.int64)
    placement_keys(tier, gpus, done, stride, key)
    start = counting_order(key, 5 * stride, order)
    return order, start, stride


def serve_starving(state: RoundState, t: int, s: Slate, tier: I8, placed: BOOL, *, room: bool) -> I64:
    """No starvation, ARCHITECTURE.md §Clearing step 5: a gang that has waited at least ``starve_rounds`` and
    competes (selected by a tier, or bidding at least the posted price) is placed before everything else; if it
    does not fit, nodes are reserved for it (longest wait first, at most ``max_reservations`` per type).
    Without ``room`` (no GPU of the type free on an open node) none fits, and none is tried. Returns the
    positions placed."""
    book, floor = state.book, state.floor
    done: list[int] = []
    if not state.any_starving:
        return np.zeros(0, dtype=np.int64)
    starving = np.empty(s.rows.shape[0], dtype=np.int64)
    posted = int(book.types.posted[t])
    n = starving_order(s.rows, state.starving, tier, s.price, posted, book.bids.waited, starving)
    for at in starving[: min(n, book.policy.max_reservations)].tolist():
        row, k = int(s.rows[at]), int(s.gpus[at])
        floor.context = (TIER_S if tier[at] < 0 else int(tier[at]), t)
        if room and pl.place_one(floor, t, k, row):
            placed[at] = True
            done.append(at)
            state.count("starving_placed")
            continue
        nodes = pl.reserve_for(floor, t, k).tolist()
        state.reserved_jobs += [(node, int(book.bids.job[row])) for node in nodes]
        state.count("starving_reserved", 1 if nodes else 0)
    return np.array(done, dtype=np.int64)


def record(
    state: RoundState,
    t: int,
    s: Slate,
    tier: I8,
    placed: BOOL,
    below: I64 | None,
    price: I64,
    left: I64,
    *,
    spot_supply: int,
    room: bool,
) -> I64:
    """Note the winners of this type and, for every other bid of it (the slate's and ``below`` it), the reason
    it lost here (``kernels.note_outcomes``). ``left``: each tenant's guarantee still unused after tier G;
    without ``room`` (no GPU of the type was free on an open node, and free GPUs only become fewer in a
    round) the largest gang that could still land is none. Returns the winning rows."""
    book, bids = state.book, state.book.bids
    won = np.zeros(len(book.tenants), dtype=np.int64)
    low, lose = note_outcomes(
        (s.rows, s.price, s.tenant, s.gpus),
        tier,
        placed,
        np.zeros(0, dtype=np.int64) if below is None else below,
        (price, bids.tenant, bids.gpus),
        (state.won_bid, state.over_budget, state.reason, state.reason_type, state.figure),
        won,
        left,
        t,
        int(book.types.posted[t]),
        spot_supply,
        pl.largest_fit(state.floor, t) if room else 0,
    )
    state.won[:, t] += won
    if low >= 0:
        state.s_low[t] = low if state.s_low[t] < 0 else min(low, int(state.s_low[t]))
    if lose >= 0:
        state.s_lose[t] = max(int(state.s_lose[t]), lose)
    return np.compress(placed, s.rows)


__all__ = ["clear"]
