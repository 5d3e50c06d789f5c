"""How long a start's budget hold pays for in a replay (docs/predictions.md §Simulated holds).

The traces carry no max hours, so a tenant is assumed to declare the same max hours for every job
(`max_hours`), or what the job needs when that is longer (it would otherwise be killed, which the trace shows
did not happen). Three rules:

- exact (the default, and the only one before): the hold is the work the job still needs, which only the
  simulator knows; a budget then limits exactly what the tenant spends;
- max-hours: the hold is the declared max hours, as on the platform by default;
- predicted: the hold is the predicted 90th-percentile remaining runtime (allocator/predict.py, fed only by the
  jobs this replay finished so far), at least MIN_HOLD_S, at most the max hours; max hours without a prediction.
  A job that outlives it is extended from the available balance by as long again (never past max hours) or,
  when the balance cannot pay, stopped at its hold: the platform's "extend" choice.

Only tenants with a budget are affected: without one, no hold ever limits a start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOLD_RULES = ("exact", "max-hours", "predicted")
MIN_HOLD_S = 600  # as market.selectors.holds.MIN_HOLD_SECONDS
STOPPED_AT_HOLD = "stopped at its hold: the balance could not extend it"


@dataclass(frozen=True)
class HoldRule:
    rule: str = "exact"
    max_hours: float = 168.0

    def __post_init__(self) -> None:
        if self.rule not in HOLD_RULES:
            raise ValueError(f"hold rule must be one of {', '.join(HOLD_RULES)}")
        if not self.max_hours > 0:
            raise ValueError("max hours must be positive")


def sized_hold_s(remaining_p90_s: float | None, overhead_s: int, declared_max_s: int) -> int:
    """The predicted rule's hold: p90 of the remaining runtime plus any restart overhead owed, bounded."""
    if remaining_p90_s is None:
        return declared_max_s
    return min(max(math.ceil(remaining_p90_s) + overhead_s, MIN_HOLD_S), declared_max_s)
