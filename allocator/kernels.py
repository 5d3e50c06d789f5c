"""The sequential rules of a round as compiled loops (``allocator.jit``): each walks its bids once, in the order
the rule gives them, and writes its outcome in place.

Arrays are indexed either by bid row (``price``, ``over_budget``, ...) or by position in a slate (a type's
bids in market order: ``tier``, ``seg``, ``size``); each docstring says which.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_S
from allocator.jit import compiled
from allocator.result import GUARANTEE_FULL, NO_FIT, OUTBID

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
BOOL = NDArray[np.bool_]


@compiled
def first_fit(tier: I8, value: int, hi: int, seg: I32, size: I32, cap: I64) -> int:
    """Sequential first-fit, the rule of tier G (ARCHITECTURE.md §Clearing step 2), tier B's fill of floor(e_t)
    (step 3) and re-tiering: each position below ``hi`` still open (``tier`` -1), in order, takes ``value`` when
    its ``size`` fits what is left of ``cap[seg]``; a position that does not fit is skipped and later smaller
    ones may still fit. ``cap`` is spent in place. Returns the units taken."""
    taken = 0
    for i in range(hi):
        if tier[i] == -1:
            s, k = seg[i], size[i]
            if k <= cap[s]:
                tier[i] = value
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
def demand_by_seg(tier: I8, hi: int, seg: I32, size: I32, n_seg: int) -> I64:
    """Tier B demand, ARCHITECTURE.md §Clearing step 3: the GPUs each tenant asks at positions below ``hi``
    (those priced at or above p) still open (``tier`` -1)."""
    out = np.zeros(n_seg, dtype=np.int64)
    for i in range(hi):
        if tier[i] == -1:
            out[seg[i]] += size[i]
    return out


@compiled
def poor_rows(rows: I64, tenant: I32, gpus: I32, price: I64, max_s: I64, budget: I64) -> I64:
    """The rows (of ``rows``, ascending) of the tenants who might not pay for all of them at their limit
    prices: the budget filter (step 1) need only run over these, every other tenant's bids all pass. A float
    bound of each tenant's holds decides, one unit per bid over (each hold is rounded up) and a relative margin
    for float error, so a tenant left out surely pays for everything."""
    bound = np.zeros(budget.shape[0], dtype=np.float64)
    for r in rows:
        bound[tenant[r]] += gpus[r] * (price[r] * (max_s[r] / 3600.0)) + 1.0
    poor = bound * (1 + 1e-9) + 1 >= budget
    n = 0
    for r in rows:
        n += poor[tenant[r]]
    out = np.empty(n, dtype=np.int64)
    j = 0
    for r in rows:
        if poor[tenant[r]]:
            out[j] = r
            j += 1
    return out


@compiled
def budget_prefix(
    rows: I64,
    tenant: I32,
    gpus: I32,
    price: I64,
    max_s: I64,
    budget: I64,
    choice: I32,
    over_budget: BOOL,
    reason_type: I32,
    figure: I64,
) -> I64:
    """Budget filter, ARCHITECTURE.md §Clearing step 1: ``rows`` in market order (so each tenant's in its own
    order) are admitted while the sum of their holds at the limit price, ceil(gpus * price * max_s / 3600),
    fits the tenant's ``budget``; from the first that does not, every later bid of that tenant is refused too.
    The first refusal of a bid notes it (``over_budget``, the type tried, the hold it needed as ``figure``).
    Returns the refused rows, in the given order."""
    spent = np.zeros(budget.shape[0], dtype=np.int64)
    blocked = np.zeros(budget.shape[0], dtype=np.bool_)
    refused = np.empty(rows.shape[0], dtype=np.int64)
    n = 0
    for r in rows:
        t = tenant[r]
        need = (price[r] * max_s[r] * gpus[r] + 3599) // 3600
        if not blocked[t] and spent[t] + need <= budget[t]:
            spent[t] += need
            continue
        blocked[t] = True
        refused[n] = r
        n += 1
        if not over_budget[r]:
            over_budget[r] = True
            reason_type[r] = choice[r]
            figure[r] = need
    return refused[:n]


@compiled
def note_winners(
    rows: I64,
    tenant: I32,
    gpus: I32,
    price: I64,
    tier: I8,
    placed: BOOL,
    won_bid: BOOL,
    won: I64,
    selected: BOOL,
) -> int:
    """The winners of a slate (positions in market order): mark their bid rows won and count each tenant's GPUs
    won (``won``); mark the rows chosen by a tier but not placed (``selected``). Returns the lowest price among
    the spot winners (-1: none)."""
    low = -1
    for i in range(rows.shape[0]):
        if placed[i]:
            won_bid[rows[i]] = True
            won[tenant[i]] += gpus[i]
            if tier[i] == TIER_S and (low < 0 or price[i] < low):
                low = price[i]
        elif tier[i] >= 0:
            selected[rows[i]] = True
    return low


@compiled
def note_losers(
    rows: I64,
    price: I64,
    won_bid: BOOL,
    skip: BOOL,
    selected: BOOL,
    tenant: I32,
    gpus: I32,
    left: I64,
    t: int,
    posted: int,
    spot_supply: int,
    low: int,
    largest: int,
    reason: I8,
    reason_type: I32,
    figure: I64,
) -> int:
    """Why each bid of one type (``rows``, bid rows) that did not win lost there (docs/allocator.md, reasons):
    chosen by a tier but not placed, or priced to win but no node fits: no node fits (figure: the largest gang
    that could still land); else, when tier G and B took every GPU, guarantee full and below p (figure p) or
    outbid with no price that would have won (-1); else outbid when at or below the lowest winning spot price
    (figure: that price + 1). Rows marked in ``skip`` (refused by the budget filter in an earlier pass) keep
    that reason. Returns the highest losing price (-1: none lost)."""
    # Branch-free on purpose: which bids won is close to random in row order, and a mispredicted branch per
    # bid cost more than the rest of the loop. So: ``&`` rather than ``and``, and each store blends the old
    # value arithmetically (``x + (y - x) * keep``; a plain ``y if keep else x`` compiles to a branch again).
    lose = -1
    no_spot, beaten = spot_supply <= 0, (spot_supply > 0) & (low >= 0)
    for r in rows:
        p = price[r]
        lost = not won_bid[r]
        lose = max(lose, p if lost else -1)
        keep = np.int64(lost & (not skip[r]))
        unsold = not selected[r]
        full = unsold & no_spot & (left[tenant[r]] < gpus[r]) & (p < posted)
        none = unsold & no_spot & (not full)
        beat = unsold & beaten & (p <= low)
        why = GUARANTEE_FULL if full else OUTBID if (none | beat) else NO_FIT
        fig = posted if full else -1 if none else low + 1 if beat else largest
        reason_type[r] += (t - reason_type[r]) * keep
        reason[r] += (why - reason[r]) * keep
        figure[r] += (fig - figure[r]) * keep
    return lose
