"""Steps 2-4 of ARCHITECTURE.md §Clearing, by count: tier G, the entitlement and tier B, tier S, the spot price.

Each rule takes one type's open bids in market order (so each tenant's in its own order) as positions with their
tenant and gang size, and returns which positions it selects; placement comes later (placement.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator.reference.fill import Ints, fill_from, first_fit, water_fill

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]


def tier_g(tenant: Ints, gpus: Ints, unused: I64) -> BOOL:
    """Tier G (step 2): each tenant's bids, in its own order, first-fit into its unused guarantee (q minus every
    GPU it holds, in any tier). Price r; never preempted."""
    could = gpus <= unused[tenant]  # a larger gang never fits: what is unused only shrinks
    taken = np.zeros(tenant.shape[0], dtype=np.bool_)
    if could.any():
        pos = np.flatnonzero(could)
        taken[pos] = first_fit(gpus[pos], unused, tenant[pos])
    return taken


def excess(schedulable: int, held: NDArray[np.integer[Any]], guarantee: NDArray[np.integer[Any]]) -> int:
    """The excess E of a type (step 3): its schedulable GPUs minus what tenants use within their guarantees."""
    return max(int(schedulable - np.minimum(held, guarantee).sum()), 0)


def entitlement(
    held: I64, guarantee: I64, pending: I64, weight: F64, schedulable: int, credit: F64 | None = None
) -> F64:
    """Entitlement over holdings (step 3), per tenant of one type: weighted water-filling of the excess E over
    each tenant's excess want (GPUs held above its guarantee plus its eligible pending demand at or above p).
    ``held``: GPUs each tenant holds now, every tier; ``pending``: GPUs its pending bids at or above p ask.
    ``credit``: the fair-share history in GPUs (allocator.fairshare.credit): a tenant owed c starts the filling
    c GPUs ahead, one that received beyond its target starts behind, so tenant t receives
    min(want_t, max(0, w_t * level + c_t)); the excess is still split in full, so the history moves GPUs of the
    excess between tenants and never touches a guarantee.
    The one definition: tier B, fair reclaim, the invariants and the admin console's fairness page call it."""
    want = (np.maximum(held - guarantee, 0) + pending).astype(np.float64)
    supply = float(excess(schedulable, held, guarantee))
    if credit is None or not credit.any():
        return water_fill(want, weight, supply)
    return fill_from(-credit, want, weight, supply)


def whole_gpus(e: F64) -> F64:
    """Entitlements in whole GPUs by largest remainder (Hamilton's apportionment): each tenant gets floor(e_t),
    and the GPUs the floors leave over (sum e less the sum of floors) go one each to the largest fractional
    parts, ties to the lower tenant index. So the split hands out every GPU of the excess it covers instead of
    losing up to one per tenant to rounding, and no tenant is more than one GPU from its exact share.

    Why: with plain floors a third tenant's fraction of a GPU shrinks a second's room below its gang, which then
    falls to tier S, changes the placement, and can make a raised bid lose (shared/cases/raise-loses.book.json):
    the same GPUs counted whole go where the weights say."""
    base = np.floor(e + 1e-9)
    spare = int(np.floor(e.sum() + 1e-9) - base.sum())
    if spare <= 0:
        return np.asarray(base, dtype=np.float64)
    frac = e - base
    order = np.lexsort((np.arange(e.shape[0]), -frac))
    base[order[:spare]] += 1
    return np.asarray(base, dtype=np.float64)


def share(x: F64, weight: F64, credit: F64 | None = None) -> F64:
    """A tenant's standing in the split of the excess (step 3): the excess it holds less what the history says
    it is owed, per weight. Lower stands first: tier B's free GPUs and fair reclaim's claimants."""
    return np.asarray((x if credit is None else x - credit) / weight, dtype=np.float64)


def tier_b(
    tenant: Ints,
    gpus: Ints,
    entitled: F64,
    held_excess: I64,
    weight: F64,
    supply: int,
    credit: F64 | None = None,
) -> BOOL:
    """Tier B (step 3): each tenant first-fits its bids at or above p, in its own order, into floor(e_t) minus the
    excess it already holds (never negative). Where those room exceed the GPUs free this round, the free GPUs go
    to whoever stands lowest (``share``: excess held less the history's credit, per weight) first
    (``fill_from``). Price p."""
    room = np.maximum(np.floor(entitled + 1e-9) - held_excess, 0)
    if room.sum() > supply:
        base = held_excess.astype(np.float64) - (0.0 if credit is None else credit)
        room = np.floor(fill_from(base, room, weight, float(max(supply, 0))) + 1e-9)
    return first_fit(gpus, room.astype(np.int64), tenant)


def tier_s(gpus: Ints, supply: int) -> BOOL:
    """Tier S (step 4): what is left goes to the highest remaining bids per GPU (open positions in market order),
    first-fit by count. Preemptible."""
    return first_fit(gpus, np.array([max(supply, 0)], dtype=np.int64))


def spot_price(reserve: int, posted: int, first_losing: int, lowest_winning: int) -> int:
    """The uniform tier-S price (step 4): max(r, min(first losing bid, lowest winning bid, p)); ``first_losing``
    is -1 when nobody lost."""
    candidates = [lowest_winning, posted] + ([first_losing] if first_losing >= 0 else [])
    return max(reserve, min(candidates))
