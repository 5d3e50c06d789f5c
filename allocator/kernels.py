"""The sequential rules of a round as compiled loops (``allocator.jit``): each walks its bids once, in the order
the rule gives them, and writes its outcome in place.

Arrays are indexed either by bid row (``price``, ``over_budget``, ...) or by position in a slate (a type's
bids in market order: ``tier``, ``seg``, ``size``); each docstring says which.

Kernels write large outputs into arrays the caller allocates with numpy, never their own: numpy asks the kernel
for huge pages on arrays of 4 MiB and more, numba's allocator does not, and the page faults of a kernel's own
10^6-row arrays (thousands per round, 4 KiB each) cost more than the kernels themselves.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.jit import compiled
from allocator.result import BELOW_RESERVE, GUARANTEE_FULL, NO_FIT, OUTBID, OVER_BUDGET

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]
U64 = NDArray[np.uint64]
F64 = NDArray[np.float64]


@compiled
def first_fit(tier: I8, value: int, hi: int, seg: I32, size: I32, cap: I64) -> int:
    """Sequential first-fit, the rule of tier G (ARCHITECTURE.md §Clearing step 2) and tier B's fill of
    floor(e_t) (step 3): each position below ``hi`` still open (``tier`` -1), in order, takes ``value`` when
    its ``size`` fits what is left of ``cap[seg]``; a position that does not fit is skipped and later smaller
    ones may still fit. ``cap`` is spent in place. Returns the units taken. Branch-free: whether a bid fits
    its tenant's rest is too irregular for a branch on it to predict."""
    taken = 0
    for i in range(hi):
        s, k = seg[i], size[i]
        fit = (tier[i] == -1) & (k <= cap[s])
        tier[i] = value if fit else tier[i]
        k = k if fit else 0
        cap[s] -= k
        taken += k
    return taken


@compiled
def first_fit_pool(tier: I8, value: int, size: I32, cap: int) -> int:
    """Tier S by count, ARCHITECTURE.md §Clearing step 4: the open positions (``tier`` -1), in market order,
    take ``value`` while their gangs fit the ``cap`` GPUs left; one that does not fit is skipped. Returns the
    GPUs left over."""
    for i in range(tier.shape[0]):
        if cap <= 0:
            break
        if tier[i] == -1 and size[i] <= cap:
            tier[i] = value
            cap -= size[i]
    return cap


@compiled
def water_fill(demand: I64, weight: F64, supply: int, share: I64) -> None:
    """Weighted water-filling, ARCHITECTURE.md §Clearing step 3, into ``share``: e_t = floor(min(d_t, w_t * L))
    where the level L solves sum min(d_t, w_t * L) = supply (every d_t when the demands fit).

    L is found by saturating tenants in rounds instead of sorting them by d_t / w_t: with S the tenants known
    to be satisfied, L' = (supply - demand of S) / weight of the rest never exceeds L, and every tenant whose
    ratio is at most L' is satisfied too; when a round adds none, L' is L. Each round is a pass over the
    tenants without a branch to mispredict (a sort of the ratios mispredicts about half its comparisons, which
    made it the costliest part of tier B), and a few rounds suffice. Sums run in tenant order, so the result
    is a function of the inputs alone. Floors lose at most one GPU per tenant; float error that would make the
    shares exceed the supply is taken back from the largest shares."""
    n, total = demand.shape[0], 0
    for t in range(n):
        total += demand[t]
    if total <= supply or supply <= 0:
        for t in range(n):
            share[t] = demand[t] if total <= supply else 0
        return
    ratio = np.empty(n, dtype=np.float64)
    open_ = np.empty(n, dtype=np.bool_)  # not (yet) known to be satisfied
    for t in range(n):
        ratio[t] = demand[t] / weight[t]
        open_[t] = demand[t] > 0  # tenants asking nothing are satisfied at any level
    done, level = 0, 0.0
    for _ in range(n):
        w_rest = 0.0
        for t in range(n):
            w_rest += weight[t] if open_[t] else 0.0
        if w_rest <= 0.0:  # float error only: everyone satisfied below the supply; keep the last level
            break
        level = (supply - done) / w_rest
        added = 0
        for t in range(n):
            now = open_[t] & (ratio[t] <= level)
            done += demand[t] if now else 0
            added += now
            open_[t] = open_[t] & (not now)
        if added == 0:
            break
    given = 0
    for t in range(n):
        share[t] = min(demand[t], int(math.floor(weight[t] * level + 1e-9)))
        given += share[t]
    if given > supply:
        for t in np.argsort(-share, kind="mergesort")[: given - supply]:
            share[t] -= 1


@compiled
def tier_b_fill(tier: I8, at_p: int, seg: I32, size: I32, weight: F64, supply: int, share: I64) -> int:
    """Tier B, ARCHITECTURE.md §Clearing step 3: each tenant's demand is its open positions below ``at_p``
    (priced at or above p); the ``supply`` is water-filled over the demands into ``share`` (e_t); then each
    tenant first-fits its positions, in market order, into floor(e_t). Returns the GPUs taken."""
    demand = np.zeros(share.shape[0], dtype=np.int64)
    for i in range(at_p):
        if tier[i] == -1:
            demand[seg[i]] += size[i]
    water_fill(demand, weight, max(supply, 0), share)
    return first_fit(tier, TIER_B, at_p, seg, size, share.copy())


@compiled
def poor_tenants(rows: I64, tenant: I32, gpus: I32, price: I64, max_s: I64, budget: I64) -> tuple[BOOL, int]:
    """The tenants who might not pay for all their bids of ``rows`` at their limit prices, and how many bids
    they have there: the budget filter (step 1) need only walk these, every other tenant's bids all pass. A
    float bound of each tenant's holds decides, one unit per bid over (each hold is rounded up) and a relative
    margin for float error, so a tenant left out surely pays for everything.

    The products first, then the sums by tenant, in loops of their own (58 us at 10^4 bids in one loop, 33 in
    two), into an array of the kernel's own: one passed in might alias the inputs, and the product loop then
    ran half as fast."""
    ask = np.empty(rows.shape[0], dtype=np.float64)
    for i in range(rows.shape[0]):
        r = rows[i]
        ask[i] = float(gpus[r]) * float(price[r]) * float(max_s[r]) + 3600.0  # the hold's seconds, +1 unit
    bound = np.zeros(budget.shape[0], dtype=np.float64)
    for i in range(rows.shape[0]):
        bound[tenant[rows[i]]] += ask[i]
    poor = bound * ((1 + 1e-9) / 3600.0) + 1 >= budget
    n = 0
    for r in rows:
        n += poor[tenant[r]]
    return poor, n


@compiled
def poor_bids(
    rows: I64, poor: BOOL, tenant: I32, gpus: I32, price: I64, max_s: I64, out: tuple[I64, I64, I32, I64]
) -> None:
    """The bids of ``rows`` (ascending) of the ``poor`` tenants, in row order, as compact copies: (row, price,
    tenant, hold at the limit price ceil(gpus * price * max_s / 3600)). The filter then reads them in market
    order without straying over the whole book."""
    o_row, o_price, o_tenant, o_need = out
    j = 0
    for r in rows:
        if poor[tenant[r]]:
            o_row[j], o_price[j], o_tenant[j] = r, price[r], tenant[r]
            o_need[j] = (price[r] * max_s[r] * gpus[r] + 3599) // 3600
            j += 1


@compiled
def budget_prefix(
    order: I64,
    rows: I64,
    tenant: I32,
    need: I64,
    budget: I64,
    choice: I32,
    over_budget: BOOL,
    reason_type: I32,
    figure: I64,
    refused: I64,
) -> int:
    """Budget filter, ARCHITECTURE.md §Clearing step 1: the bids (``rows`` with their ``tenant`` and hold at
    the limit price, ``need``) taken in market ``order`` (positions; so each tenant's in its own order) are
    admitted while the sum of their holds fits the tenant's ``budget``; from the first that does not, every
    later bid of that tenant is refused too. The first refusal of a bid notes it (``over_budget``, the type
    tried, the hold it needed as ``figure``). Writes the refused rows to ``refused``; returns how many."""
    spent = np.zeros(budget.shape[0], dtype=np.int64)
    blocked = np.zeros(budget.shape[0], dtype=np.bool_)
    n = 0
    for i in order:
        t, k = tenant[i], need[i]
        if not blocked[t] and spent[t] + k <= budget[t]:
            spent[t] += k
            continue
        blocked[t] = True
        r = rows[i]
        refused[n] = r
        n += 1
        if not over_budget[r]:
            over_budget[r] = True
            reason_type[r] = choice[r]
            figure[r] = k
    return n


@compiled
def _loss(
    unsold: bool, p: int, short: bool, posted: int, spot_supply: int, low: int, largest: int
) -> tuple[int, int]:
    """The reason a bid lost in its type and the figure behind it (docs/allocator.md, reasons): chosen by a tier
    but not placed, or priced to win with no node left for it: no node fits (figure: the largest gang that
    could still land). Else, when tiers G and B took every GPU: guarantee full and below p (figure p) if its
    tenant's unused guarantee is ``short`` of the gang, or outbid with no price that would have won (-1). Else
    outbid when at or below the lowest winning spot price (figure: that price + 1)."""
    if unsold:
        if spot_supply <= 0:
            if short and p < posted:
                return GUARANTEE_FULL, posted
            return OUTBID, -1
        if low >= 0 and p <= low:
            return OUTBID, low + 1
    return NO_FIT, largest


@compiled
def note_outcomes(
    slate: tuple[I64, I64, I32, I32],
    tier: I8,
    placed: BOOL,
    below: I64,
    bids: tuple[I64, I32, I32],
    notes: tuple[BOOL, BOOL, I8, I32, I64],
    won: I64,
    left: I64,
    t: int,
    posted: int,
    spot_supply: int,
    largest: int,
) -> tuple[int, int]:
    """The outcome of one type in one pass. ``slate``: (rows, price, tenant, gpus) by position in market order,
    with ``tier`` and ``placed``; ``below``: the other bid rows of the type; ``bids``: (price, tenant, gpus)
    by bid row; ``notes``: (won, skip, reason, type tried, figure) by bid row.

    Winners are marked won and counted per tenant in ``won``. Every other bid gets the reason it lost here
    (``_loss``) unless ``skip`` holds (refused by the budget filter in an earlier pass: that reason stands).
    Returns the lowest winning spot price and the highest losing price (-1: none).

    The losers are walked in market order on the slate and in row order below it, never the other way round:
    in market order, won or lost changes rarely from one bid to the next, so the branches predict well (in row
    order a branch on it missed half the time and cost more than the rest of the loop)."""
    rows, s_price, s_tenant, s_gpus = slate
    price, tenant, gpus = bids
    won_bid, skip, reason, reason_type, figure = notes
    low = lose = -1
    for i in range(rows.shape[0]):
        if placed[i]:
            won_bid[rows[i]] = True
            won[s_tenant[i]] += s_gpus[i]
            if tier[i] == TIER_S and (low < 0 or s_price[i] < low):
                low = s_price[i]
    for i in range(rows.shape[0]):
        r = rows[i]
        if placed[i]:
            continue
        lose = max(lose, s_price[i])
        if skip[r]:
            continue
        short = left[s_tenant[i]] < s_gpus[i]
        why, fig = _loss(tier[i] < 0, s_price[i], short, posted, spot_supply, low, largest)
        reason[r], reason_type[r], figure[r] = why, t, fig
    for r in below:  # never chosen by a tier; every spot winner is priced above them
        lose = max(lose, price[r])
        if skip[r]:
            continue
        why, fig = _loss(True, price[r], left[tenant[r]] < gpus[r], posted, spot_supply, low, largest)
        reason[r], reason_type[r], figure[r] = why, t, fig
    return low, lose


@compiled
def sold_out_split(
    rows: I64,
    bids: tuple[I64, I32, I32],
    unused: I64,
    starving: BOOL,
    notes: tuple[BOOL, I8, I32, I64],
    t: int,
    posted: int,
    rest: I64,
) -> tuple[int, int]:
    """A later pass in type ``t`` with no GPU free on its open nodes (``clearing.sold_out``): of ``rows``
    (with ``bids``: price, tenant, gpus by bid row), the bids that may still win, in order, into ``rest``: a
    gang its tenant's ``unused`` guarantee holds (tier G, restored by reclaim) or a ``starving`` one (it may
    reserve nodes). Every other bid loses as ``note_outcomes`` would note it (never chosen, no spot supply,
    short of guarantee): guarantee full below p (figure p), else outbid with no price that would have won,
    unless refused by the budget filter earlier (``notes``: skip, reason, type tried, figure by bid row).
    Returns how many may win and the highest losing price (-1: none)."""
    price, tenant, gpus = bids
    skip, reason, reason_type, figure = notes
    n, lose = 0, -1
    for r in rows:
        may = (gpus[r] <= unused[tenant[r]]) | starving[r]
        rest[n] = r
        n += may
        if not may:
            p = price[r]
            lose = max(lose, p)
            if not skip[r]:
                under = p < posted
                reason[r] = GUARANTEE_FULL if under else OUTBID
                figure[r] = posted if under else -1
                reason_type[r] = t
    return n, lose


@compiled
def starving_order(
    rows: I64, starving: BOOL, tier: I8, price: I64, posted: int, waited: I32, out: I64
) -> int:
    """No starvation, ARCHITECTURE.md §Clearing step 5: the slate positions (``rows``, ``tier`` and ``price``
    by position) of the starving gangs (``starving``, by bid row) that compete, chosen by a tier or bidding
    at least ``posted``, longest wait first (``waited``, by bid row), ties in market order; into ``out``,
    returns how many. One scan of the slate: starving gangs are few, and numpy took five calls for it."""
    n = 0
    for i in range(rows.shape[0]):
        if starving[rows[i]] and (tier[i] >= 0 or price[i] >= posted):
            out[n] = i
            n += 1
    if n > 1:
        at = out[:n].copy()
        wait = np.empty(n, dtype=np.int64)
        for j in range(n):
            wait[j] = -waited[rows[at[j]]]
        out[:n] = at[np.argsort(wait, kind="mergesort")]  # stable: market order among equal waits
    return n


@compiled
def below_reserve(first: I32, limit: I64, reserve: I64, notes: tuple[I8, I32, I64]) -> None:
    """Eligibility, ARCHITECTURE.md §Clearing step 1: every bid without a type to try (``first``, its first
    preference, is -1) is below the reserve of every type it accepts (``limit``: bid x type, -1 where not
    accepted); ``notes`` (reason, type, figure by bid row) get below reserve, with the type of the lowest of
    those reserves (the first of equals) and that reserve (the largest integer where it accepts none)."""
    reason, reason_type, figure = notes
    for i in range(first.shape[0]):
        if first[i] >= 0:
            continue
        best, low = 0, np.iinfo(np.int64).max
        for t in range(limit.shape[1]):
            if limit[i, t] >= 0 and reserve[t] < low:
                best, low = t, reserve[t]
        reason[i], reason_type[i], figure[i] = BELOW_RESERVE, best, low


@compiled
def split_by_type(rows: I64, choice: I32, n_types: int, out: I64) -> I64:
    """``rows`` (ascending) grouped by the type each tries this pass (``choice``, by bid row, at least 0 on
    ``rows``) into ``out``, each group still ascending; returns where each type's group starts (one more than
    types). A counting sort in two passes over the rows, where numpy took a gather, a cast, a sort and a
    gather."""
    start = np.zeros(n_types + 1, dtype=np.int64)
    for r in rows:
        start[choice[r] + 1] += 1
    for t in range(n_types):
        start[t + 1] += start[t]
    at = start[:n_types].copy()
    for r in rows:
        t = choice[r]
        out[at[t]] = r
        at[t] += 1
    return start


@compiled
def nodes_by_type(gpu_type: I32, capacity: I32, n_types: int, order: I64) -> tuple[I64, I64]:
    """The nodes grouped by GPU type into ``order``, each group ascending (a counting sort, ``split_by_type``);
    returns where each type's group starts (one more than types) and the largest node of each type (0: none).
    One call where numpy took a stable argsort, a search and a max per type."""
    start = np.zeros(n_types + 1, dtype=np.int64)
    max_cap = np.zeros(n_types, dtype=np.int64)
    for j in range(gpu_type.shape[0]):
        t = gpu_type[j]
        start[t + 1] += 1
        max_cap[t] = max(max_cap[t], capacity[j])
    for t in range(n_types):
        start[t + 1] += start[t]
    at = start[:n_types].copy()
    for j in range(gpu_type.shape[0]):
        t = gpu_type[j]
        order[at[t]] = j
        at[t] += 1
    return start, max_cap


@compiled
def spend_holds(won: I64, bids: tuple[I32, I32, I64], price: I64, budget: I64) -> None:
    """What a type's winners (``won``, bid rows; ``bids``: tenant, gang size, max_s by bid row) may spend comes
    off their tenants' ``budget`` before a later pass: each one's hold at its limit ``price`` (``hold_of``),
    the most it can be charged, so a later pass never admits what the budget cannot pay."""
    tenant, gpus, max_s = bids
    for r in won:
        budget[tenant[r]] -= (price[r] * max_s[r] * gpus[r] + 3599) // 3600


@compiled
def keep_rows(rows: I64, keep: BOOL, out: I64) -> int:
    """The rows of ``rows`` whose ``keep`` (by bid row) holds, in order, into ``out``; returns how many.
    Branch-free (every row is written, only a kept one advances): one pass where numpy's gather of the
    flags and compress took two (188 us at 10^5 bids)."""
    j = 0
    for r in rows:
        out[j] = r
        j += keep[r]
    return j


@compiled
def split_rows(rows: I64, price: I64, theta: int, high: I64, low: I64) -> int:
    """``rows`` (ascending) split into ``high``, those priced at or above ``theta``, and ``low``, the rest,
    each still ascending (the slate and the bids below it, ``clearing.clear_slate``); both outputs as long as
    ``rows``. Returns how many are high. Branch-free: each row is written to both at their next free place
    and only one advances, as whether a bid is above θ is close to random in row order."""
    i = j = 0
    for r in rows:
        up = int(price[r] >= theta)
        high[i], low[j] = r, r
        i += up
        j += 1 - up
    return i


@compiled
def column_span(rows: I64, price: I64, gpus: I32, tenant: I32) -> tuple[int, int, int, int]:
    """Over ``rows``: the lowest and highest price, and the highest gang size and tenant (-1 where either is
    negative, which packed keys cannot carry): what ``tiers.market_columns`` needs to size its keys."""
    lo, hi, g_max, m_max, bad = price[rows[0]], price[rows[0]], 0, 0, False
    for r in rows:
        p, g, m = price[r], gpus[r], tenant[r]
        lo, hi = min(lo, p), max(hi, p)
        g_max, m_max = max(g_max, g), max(m_max, m)
        bad |= (g < 0) | (m < 0)
    return lo, hi, -1 if bad else g_max, -1 if bad else m_max


@compiled
def pack_keys(
    rows: I64,
    price: I64,
    rank: I64,
    gpus: I32,
    tenant: I32,
    top: int,
    widths: tuple[int, int, int],
    key: I64,
) -> None:
    """Sort keys of market order carrying their columns: (top - price, rank, tenant, gang size) packed from the
    high bits down, into ``key``; ``rank`` by bid row, or empty when the rank of a row is the row itself;
    ``widths``: the bits of rank, tenant and gang size."""
    bits, m_bits, g_bits = widths
    ranked = rank.shape[0] > 0
    for i in range(rows.shape[0]):
        r = rows[i]
        k = (top - price[r]) << bits
        k |= rank[r] if ranked else r
        k = ((k << m_bits) | tenant[r]) << g_bits
        key[i] = k | gpus[r]


@compiled
def unpack_keys(
    key: I64, top: int, bits: tuple[int, int, int], by_rank: I64, out: tuple[I64, I64, I32, I32]
) -> None:
    """``pack_keys`` undone after the sort, into ``out``: bid rows, prices, gang sizes and tenants in market
    order (``by_rank``: the row of each rank, or empty when ranks are rows)."""
    rows, price, gpus, tenant = out
    r_bits, m_bits, g_bits = bits
    ranked = by_rank.shape[0] > 0
    g_mask, m_mask, r_mask = (1 << g_bits) - 1, (1 << m_bits) - 1, (1 << r_bits) - 1
    for i in range(key.shape[0]):
        k = key[i]
        gpus[i] = k & g_mask
        k >>= g_bits
        tenant[i] = k & m_mask
        k >>= m_bits
        r = k & r_mask
        rows[i] = by_rank[r] if ranked else r
        price[i] = top - (k >> r_bits)


RADIX_BITS = 11  # digit width of radix_sort: 2,048 counters a pass stay in the first-level cache


@compiled
def radix_sort(key: I64, lo_bit: int, hi_bit: int, tmp: I64) -> None:
    """Sort non-negative ``key`` in place by its bits ``lo_bit``..``hi_bit``-1 (a least-significant-digit radix
    sort, ``RADIX_BITS`` a pass, stable, so bits below ``lo_bit`` ride along in their incoming order); ``tmp``:
    scratch of the same size. The keys of market order are unique in those bits (they hold the rank), so
    this is their sort. Why not numpy's sort: a pass here is one read and one scattered write per key, where
    a comparison sort makes about log2(n) passes with branches that mispredict; on the benchmark machine this
    sorts 10^4 packed keys in a quarter of numpy's time and 6 * 10^5 in a fifth. Counts for every pass come
    from one read; a pass where every key has the same digit is skipped."""
    n, radix = key.shape[0], 1 << RADIX_BITS
    passes = max(0, (hi_bit - lo_bit + RADIX_BITS - 1) // RADIX_BITS)
    count = np.zeros((passes, radix), dtype=np.int64)
    for i in range(n):
        k = key[i] >> lo_bit
        for p in range(passes):
            count[p, (k >> (p * RADIX_BITS)) & (radix - 1)] += 1
    src, dst, swapped = key, tmp, False
    for p in range(passes):
        shift, c = lo_bit + p * RADIX_BITS, count[p]
        if n == 0 or c[(key[0] >> shift) & (radix - 1)] == n:
            continue
        at = 0
        for d in range(radix):
            at, c[d] = at + c[d], at
        for i in range(n):
            k = src[i]
            d = (k >> shift) & (radix - 1)
            dst[c[d]] = k
            c[d] += 1
        src, dst, swapped = dst, src, not swapped
    if swapped:
        key[:] = tmp


@compiled
def placement_keys(tier: I8, gpus: I32, done: I64, stride: int, key: I64) -> None:
    """The keys of ``clearing.placement_order``: group * stride + stride - 1 - gang size, where the group is
    G, B, S or none (tier 0, 1, 2, -1: the low two bits of the tier give 0, 1, 2, 3), and the positions
    ``done`` (placed already) get 5 * stride - 1, after every group."""
    for i in range(tier.shape[0]):
        key[i] = (tier[i] & 3) * stride + stride - 1 - gpus[i]
    for d in done:
        key[d] = 5 * stride - 1


_LANES = 4  # counting_order's independent streams


@compiled
def counting_order(key: I64, n_keys: int, order: I64) -> I64:
    """Positions of ``key`` (small ints below ``n_keys``) sorted by key, stable, into ``order``; returns where
    each key starts (a counting sort: two passes, where numpy's stable argsort makes several).

    The keys are split into ``_LANES`` consecutive parts walked side by side, each with its own counters: most
    keys repeat the one before (most gangs are one GPU), and with one set of counters each count or write
    waited on the one before it through memory (32 us at 10^4 keys, now 11). Part c's keys go after those of
    parts before it, so the order stays stable."""
    n = key.shape[0]
    q = (n + _LANES - 1) // _LANES
    count = np.zeros((_LANES, n_keys), dtype=np.int64)
    for j in range(q):
        for c in range(_LANES):
            i = c * q + j
            if i < n:
                count[c, key[i]] += 1
    start = np.empty(n_keys + 1, dtype=np.int64)
    at = np.empty((_LANES, n_keys), dtype=np.int64)
    total = 0
    for k in range(n_keys):
        start[k] = total
        for c in range(_LANES):
            at[c, k] = total
            total += count[c, k]
    start[n_keys] = total
    for j in range(q):
        for c in range(_LANES):
            i = c * q + j
            if i < n:
                k = key[i]
                order[at[c, k]] = i
                at[c, k] += 1
    return start


_ONE = np.uint64(1)


@compiled
def free_bitmaps(f: I64) -> tuple[U64, I64]:
    """Nodes by free count for best fit: bit j of row v is set when node j has exactly v free GPUs (v > 0); and
    per row the first word that may hold a set bit."""
    bits = np.zeros((int(f.max()) + 1 if f.shape[0] else 1, (f.shape[0] + 63) // 64), dtype=np.uint64)
    for j in range(f.shape[0]):
        if f[j] > 0:
            bits[f[j], j >> 6] |= _ONE << np.uint64(j & 63)
    return bits, np.zeros(bits.shape[0], dtype=np.int64)


@compiled
def fewest_free(bits: U64, cursor: I64, k: int) -> int:
    """The smallest free count >= k that some node has (-1: none); advances the cursors past empty words."""
    for v in range(k, bits.shape[0]):
        w, row = cursor[v], bits[v]
        while w < row.shape[0] and row[w] == 0:
            w += 1
        cursor[v] = w
        if w < row.shape[0]:
            return v
    return -1


@compiled
def best_fit_run(bits: U64, cursor: I64, f: I64, used: I64, k: int, node: I64, offset: I64) -> int:
    """Placement, ARCHITECTURE.md §Clearing step 5: gangs of k GPUs, as many as ``node`` has room for, each on
    the node with the fewest free GPUs that still holds it, ties by node index. Gangs of one size placed in a
    row fill that node (floor(v / k) gangs) before the next: a node left with v - k >= k free becomes the best
    fit, as no node had fewer free GPUs that held the gang. Writes each gang's node and first free-slot offset
    (``used``: GPUs of the node handed out so far) and keeps ``f``, ``used`` and the bitmaps up to date.
    Returns how many gangs landed (a prefix)."""
    m, n = node.shape[0], 0
    while n < m:
        v = fewest_free(bits, cursor, k)
        if v < 0:
            break
        w = cursor[v]
        word = bits[v, w]
        j = w * 64 + math.frexp(float(word & (~word + _ONE)))[1] - 1  # the lowest set bit
        bits[v, w] = word & (word - _ONE)
        take = min(v // k, m - n)
        for g in range(take):
            node[n], offset[n] = j, used[j] + g * k
            n += 1
        f[j] = v - take * k
        used[j] += take * k
        if f[j] > 0:
            bits[f[j], j >> 6] |= _ONE << np.uint64(j & 63)
            cursor[f[j]] = min(cursor[f[j]], j >> 6)
    return n


@compiled
def best_node(ix: I64, free: I64, reserved: BOOL, k: int) -> int:
    """Best fit for a single gang of k (ARCHITECTURE.md §Clearing step 5): of the nodes ``ix`` (ascending) not
    reserved, the one with the fewest free GPUs that still holds it, ties by node index; -1: none."""
    best, fewest = -1, np.iinfo(np.int64).max
    for j in ix:
        f = free[j]
        if f >= k and f < fewest and not reserved[j]:
            best, fewest = j, f
    return best


@compiled
def place_sizes(
    ix: I64,
    free: I64,
    initial_free: I64,
    classes: tuple[I64, I64, int],
    groups: tuple[int, int],
    context: tuple[I8, int],
    rows: I64,
    placed: BOOL,
    spill: BOOL,
    log: tuple[I64, I64, I64, I64, I8, I32],
    at: int,
    touched: BOOL,
) -> tuple[int, bool]:
    """Placement, ARCHITECTURE.md §Clearing step 5, of the gangs that fit a node in the placement groups
    ``groups`` (first, end: of G, B, S and the rest, ``clearing.placement_order``), group by group and in each
    largest first, best fit (``best_fit_run``) on the nodes ``ix`` (open, with free GPUs). ``classes``:
    (positions in placement order, where each key starts in it, stride): the gangs of size k in group g are at
    ``order[start[key] : start[key + 1]]`` for key = g * stride + stride - 1 - k. Each placement is appended to
    ``log`` (the floor's columns: row, node, count, offset, tier, type) from entry ``at`` on, tagged with
    ``context`` (the tier of each group, the type); ``placed`` (by position) and ``touched`` (by node) are set
    and ``free`` kept up to date. ``spill`` (by size): gangs of that size wait after the last group (3); the
    placement is not final as soon as such a size runs out of gangs while one more would still land. Returns
    the next free log entry and whether the placement is final."""
    order, start, stride = classes
    group_tier, gpu_type = context
    log_row, log_node, log_count, log_offset, log_tier, log_type = log
    f = free[ix]
    used = initial_free[ix] - f
    bits, cursor = free_bitmaps(f)
    final = True
    for g in range(groups[0], groups[1]):
        if fewest_free(bits, cursor, 1) < 0:
            break
        # no gang larger than the most free GPUs on a node can land
        for k in range(bits.shape[0] - 1, 0, -1):
            lo = hi = 0
            if k < stride:
                key = g * stride + stride - 1 - k
                lo, hi = start[key], start[key + 1]
            n = best_fit_run(
                bits, cursor, f, used, k, log_node[at : at + hi - lo], log_offset[at : at + hi - lo]
            )
            for i in range(n):
                pos = order[lo + i]
                placed[pos] = True
                j = ix[log_node[at + i]]
                log_row[at + i], log_node[at + i], log_count[at + i] = rows[pos], j, k
                log_tier[at + i], log_type[at + i] = group_tier[g], gpu_type
                touched[j] = True
            at += n
            if (
                g == 3
                and k < spill.shape[0]
                and spill[k]
                and n == hi - lo
                and fewest_free(bits, cursor, k) >= 0
            ):
                final = False
                break
            if fewest_free(bits, cursor, 1) < 0:
                break
        if not final:
            break
    for i in range(ix.shape[0]):
        free[ix[i]] = f[i]
    return at, final


@compiled
def loser_columns(won_bid: BOOL, noted: tuple[I8, BOOL, I32, I64], out: tuple[I64, I8, I32, I64]) -> None:
    """The losers table in bid-row order: every bid that did not win (``won_bid``), with its reason, type and
    figure from the ``noted`` (reason, over budget, type, figure) arrays by bid row; over budget overrides a
    later reason (the figure stays the hold it needed). ``out``: (row, reason, type, figure), one more row
    than losers. Branch-free: every bid is written at the next free row, which only a loser advances (whether
    a bid won flips too often for a branch on it to predict)."""
    reason, over_budget, reason_type, figure = noted
    o_row, o_reason, o_type, o_figure = out
    j = 0
    for i in range(won_bid.shape[0]):
        o_row[j], o_type[j], o_figure[j] = i, reason_type[i], figure[i]
        o_reason[j] = OVER_BUDGET if over_budget[i] else reason[i]
        j += 1 - int(won_bid[i])


@compiled
def demand_at(limit: I64, gpus: I32, posted: I64) -> I64:
    """Demand for the posted price update, ARCHITECTURE.md §Clearing step 7: per type, the GPUs of every bid
    whose limit there (``limit``: bid x type, -1 where not accepted) is at least the posted price."""
    out = np.zeros(posted.shape[0], dtype=np.int64)
    for t in range(posted.shape[0]):
        p, total = posted[t], 0
        for r in range(limit.shape[0]):  # no branch: a bid is above p about as often as not
            total += gpus[r] * (limit[r, t] >= p)
        out[t] = total
    return out


@compiled
def in_tie_order(submit: I64, job: I64) -> bool:
    """Whether the bids are already sorted by (submit time, job id), the tie-break after price: then a bid's
    row is its rank (the usual case, as books list bids oldest first)."""
    for i in range(1, submit.shape[0]):
        if submit[i] < submit[i - 1] or (submit[i] == submit[i - 1] and job[i] <= job[i - 1]):
            return False
    return True


@compiled
def free_slot_lookup(free: NDArray[np.bool_], gappy: BOOL, ptr: I64, free_slot: I32) -> int:
    """``placement.slot_lookup``: per node (row of ``free``, node x slot) whether it is gappy (its free slots
    are not 0..f-1, so a free-slot offset is not the slot itself), into ``gappy``; the free slots of the gappy
    nodes, node by node, into ``free_slot``, with where each node's start in ``ptr`` (one more than nodes).
    Returns how many slots were listed."""
    at = 0
    for j in range(free.shape[0]):
        ptr[j] = at
        rank, gap = 0, False
        for s in range(free.shape[1]):
            gap |= free[j, s] & (s != rank)
            rank += free[j, s]
        gappy[j] = gap
        if gap:
            for s in range(free.shape[1]):
                if free[j, s]:
                    free_slot[at] = s
                    at += 1
    ptr[free.shape[0]] = at
    return at


@compiled
def winner_columns(
    log: tuple[I64, I64, I64, I64, I8, I32],
    explicit: tuple[I64, I64, I32, I64, I32],
    lookup: tuple[BOOL, I64, I32],
    table: I64,
    by_row: tuple[I64, I32, I64],
    out: tuple[I64, I8, I32, I64, I64, I32, I32],
    by_winner: tuple[I64, I32, I64],
) -> int:
    """The winners table, ARCHITECTURE.md §Clearing steps 4-6: one row per placed gang, in placement order, from
    the floor's ``log`` (row, node, count, free-slot offset, tier, type per entry; a gang on several nodes
    has consecutive entries) and then the ``explicit`` placements on GPUs freed by preemption (row, node, slots,
    where each one's slots start, type; tier G). A gang pays ``table[tier * types + type]`` per GPU-hour. A
    node's free slots are handed out in ascending order: the slot is the offset itself where they are
    0..free-1, else looked up (``lookup``: gappy by node, where each gappy node's free slots start in the list,
    the list). ``out``: (row, tier, type, price, slot_ptr, slot_node, slot_idx), sized for one winner per
    entry. Then the columns read by bid row (``by_row``: job, tenant, max_s) into ``by_winner`` (job, tenant,
    hold at its price: ``hold_of``), in a loop of their own: without branches it keeps many loads in flight,
    where inside the first loop they waited on its branches (2.5 times slower at 10^6 bids). Returns how many
    winners."""
    l_row, l_node, l_count, l_offset, l_tier, l_type = log
    x_row, x_node, x_slot, x_ptr, x_type = explicit
    gappy, ptr, free_slot = lookup
    o_row, o_tier, o_type, o_price, o_ptr, o_node, o_slot = out
    n_types, n_log = table.shape[0] // 3, l_row.shape[0]
    w = g = 0
    o_ptr[0] = 0
    for i in range(n_log):
        r = l_row[i]
        if i == 0 or r != l_row[i - 1]:  # a new gang
            o_row[w], o_tier[w], o_type[w] = r, l_tier[i], l_type[i]
            o_price[w] = table[l_tier[i] * n_types + l_type[i]]
            w += 1
        j, at = l_node[i], l_offset[i]
        if gappy[j]:
            for c in range(l_count[i]):
                o_node[g], o_slot[g] = j, free_slot[ptr[j] + at + c]
                g += 1
        else:
            for c in range(l_count[i]):
                o_node[g], o_slot[g] = j, at + c
                g += 1
        o_ptr[w] = g
    for x in range(x_row.shape[0]):
        o_row[w], o_tier[w], o_type[w] = x_row[x], TIER_G, x_type[x]
        o_price[w] = table[TIER_G * n_types + x_type[x]]
        for c in range(x_ptr[x], x_ptr[x + 1]):
            o_node[g], o_slot[g] = x_node[x], x_slot[c]
            g += 1
        w += 1
        o_ptr[w] = g
    job, tenant, max_s = by_row
    o_job, o_tenant, o_hold = by_winner
    for i in range(w):
        r = o_row[i]
        o_job[i], o_tenant[i] = job[r], tenant[r]
        o_hold[i] = ((o_ptr[i + 1] - o_ptr[i]) * o_price[i] * max_s[r] + 3599) // 3600  # hold_of
    return w


@compiled
def type_preferences(limit: I64, posted: I64, reserve: I64, out: I32) -> None:
    """Type preference, ARCHITECTURE.md §Clearing step 1: per bid (row of ``limit``, bid x type, -1 where not
    accepted), the types where its limit is at least the reserve, by decreasing margin over the posted price
    (the smallest p - limit first), ties by type index; -1 pads the row of ``out``. Up to three types, each
    type's place is counted (how many (key, type) pairs come before its own) and the type stored there: no
    branch depends on the bid and no value waits on another: 25 us at 10^4 bids and 3 types, against 94 for a
    network of compare-exchanges (each waits on the one before). The margins are computed before the reserve
    test picks them (a subtraction inside the conditional kept a branch: 48 us). More types, an insertion
    sort."""
    n_types = limit.shape[1]
    if n_types > 3:
        _preferences_by_insertion(limit, posted, reserve, out)
    elif n_types == 3:
        for r in range(limit.shape[0]):
            k0, k1, k2 = posted[0] - limit[r, 0], posted[1] - limit[r, 1], posted[2] - limit[r, 2]
            e0, e1, e2 = limit[r, 0] >= reserve[0], limit[r, 1] >= reserve[1], limit[r, 2] >= reserve[2]
            k0, k1, k2 = k0 if e0 else _NEVER, k1 if e1 else _NEVER, k2 if e2 else _NEVER
            out[r, (k1 < k0) + (k2 < k0)] = 0 if e0 else -1
            out[r, (k0 <= k1) + (k2 < k1)] = 1 if e1 else -1
            out[r, (k0 <= k2) + (k1 <= k2)] = 2 if e2 else -1
    elif n_types == 2:
        for r in range(limit.shape[0]):
            k0, k1 = posted[0] - limit[r, 0], posted[1] - limit[r, 1]
            e0, e1 = limit[r, 0] >= reserve[0], limit[r, 1] >= reserve[1]
            k0, k1 = k0 if e0 else _NEVER, k1 if e1 else _NEVER
            out[r, int(k1 < k0)] = 0 if e0 else -1
            out[r, int(k0 <= k1)] = 1 if e1 else -1
    else:
        for r in range(limit.shape[0]):
            out[r, 0] = 0 if limit[r, 0] >= reserve[0] else -1


_NEVER = np.iinfo(np.int64).max  # the preference key of a type below its reserve: sorts last, then becomes -1


@compiled
def _preferences_by_insertion(limit: I64, posted: I64, reserve: I64, out: I32) -> None:
    """``type_preferences`` for any number of types: an insertion sort per bid."""
    for r in range(limit.shape[0]):
        m = 0
        for t in range(limit.shape[1]):
            if limit[r, t] < reserve[t]:
                continue
            key, i = posted[t] - limit[r, t], m
            while i > 0 and posted[out[r, i - 1]] - limit[r, out[r, i - 1]] > key:
                out[r, i] = out[r, i - 1]
                i -= 1
            out[r, i] = t
            m += 1
        for i in range(m, limit.shape[1]):
            out[r, i] = -1


@compiled
def pass_columns(prefs: I32, j: int, limit: I64, won_bid: BOOL, rows: I64, choice: I32, price: I64) -> int:
    """The bids of pass ``j`` (``clearing.clear``): those not won yet that have a j-th preferred type
    (``prefs``, ``tiers.preference_order``), into ``rows``, ascending; returns how many. By bid row, unless
    ``choice`` and ``price`` are empty (one type: the column is the choice, the limits are the prices), the
    type each tries (-1 where none) and its limit price there (0 for bids not in the pass). One pass where
    numpy took four."""
    n = 0
    with_price, with_choice = price.shape[0] > 0, choice.shape[0] > 0
    for r in range(prefs.shape[0]):
        c = prefs[r, j]
        if with_choice:
            choice[r] = c
        go = c >= 0 and not won_bid[r]
        if with_price:
            price[r] = limit[r, c] if go else 0
        rows[n] = r
        n += go
    return n


@compiled
def unused_guarantee(guarantee: I32, held: I64, won: I64, t: int, out: I64) -> int:
    """Each tenant's guarantee of type ``t`` not yet used (ARCHITECTURE.md §Clearing step 2): q minus every GPU
    it holds there, in any tier, and has won this round, at least 0, into ``out``. Returns the sum."""
    total = 0
    for m in range(out.shape[0]):
        have = won[m, t]
        for tier in range(held.shape[1]):
            have += held[m, tier, t]
        out[m] = max(guarantee[m, t] - have, 0)
        total += out[m]
    return total


@compiled
def open_free(ix: I64, free: I64, reserved: BOOL) -> int:
    """The free GPUs on the nodes ``ix`` that may take new work (not ``reserved``)."""
    total = 0
    for j in ix:
        total += 0 if reserved[j] else free[j]
    return total


@compiled
def roomiest_node(ix: I64, free: I64, reserved: BOOL, touched: BOOL, capacity: I32, k: int) -> int:
    """No starvation, ARCHITECTURE.md §Clearing step 5 (``placement.reserve_for``): of the nodes ``ix``
    (ascending) neither reserved nor ``touched`` (took new work this round), one with room for k at all
    (``capacity``) and the most free GPUs, the first of equals; -1: none."""
    best, most = -1, -1
    for j in ix:
        if not reserved[j] and not touched[j] and capacity[j] >= k and free[j] > most:
            best, most = j, free[j]
    return best


@compiled
def largest_fit(ix: I64, free: I64, reserved: BOOL, capacity: I32, domain: I32) -> int:
    """The largest gang that could still be placed on the nodes ``ix`` now (reserved ones left out): the most
    free GPUs on one node, or the capacity of a domain's wholly free nodes together (docs/allocator.md,
    reason ``no_node_fits``)."""
    n_domains = 0
    for j in ix:
        n_domains = max(n_domains, domain[j] + 1)
    whole = np.zeros(n_domains, dtype=np.int64)
    best = 0
    for j in ix:
        if not reserved[j]:
            best = max(best, free[j])
            whole[domain[j]] += capacity[j] if free[j] == capacity[j] else 0
    for d in range(n_domains):
        best = max(best, whole[d])
    return best
