"""The reference allocator: ARCHITECTURE.md §Clearing, one module per step, plain Python and numpy. It is the
round (``allocator.clear``): no other implementation exists to disagree with it.

- order.py      step 1: eligibility, type preference, market order, budget filter
- tiers.py      steps 2-4: tier G, entitlement and tier B, tier S, the spot price (fill.py: first-fit and
                water-filling, which the tiers share)
- placement.py  step 5: best fit, whole nodes, reservations for starving gangs
- reclaim.py    steps 2 and 6: re-tiering, preemption for a guarantee and fair reclaim
- prices.py     step 7: the posted price
- round.py      the order of the steps; state.py: the round's working state; build.py: the Result
"""

from __future__ import annotations

from allocator.book import Book
from allocator.reference.build import build_result
from allocator.reference.round import clear_round
from allocator.result import Result


def clear(book: Book) -> Result:
    """Clear one round: a pure function of the book; the same book gives the same result, byte for byte."""
    return build_result(clear_round(book))


__all__ = ["clear"]
