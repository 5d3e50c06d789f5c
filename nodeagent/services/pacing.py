"""Fleet-wide pacing of the agents' reports (docs/agent.md §Pacing).

The fleet has a budget of reports per second (MarketPolicy.agent_report_budget_rps), not each node a rate:
the interval sent back in every answer is live nodes / budget, kept between AGENT_REPORT_FLOOR_S and
AGENT_REPORT_CEILING_S, and staggered by +-STAGGER per answer so that agents which came up together (a
rack's power-on, a server restart) drift apart instead of reporting in step. As Nomad does with its
heartbeat TTL (max(10 s, nodes / 50 per second)).

The live-node count is read at most every COUNT_CACHE_S per web process: the answer to every report must
not cost a count over the node table.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from inventory.models import Node
from market.selectors.policy import current_fence, market_policy_cached

STAGGER = 0.1  # each interval drawn from +-10% of the paced one
COUNT_CACHE_S = 5.0
FENCE_CACHE_S = 1.0

_lock = threading.Lock()
_cached: tuple[float, int, int] | None = None  # (monotonic time read, live nodes, budget)
_fence: tuple[float, int] | None = None


@dataclass(frozen=True)
class Pace:
    report_seconds: float
    poll_seconds: int


def _fleet() -> tuple[int, int]:
    """(live agent nodes, budget per second), cached for COUNT_CACHE_S in this process."""
    global _cached
    now = time.monotonic()
    with _lock:
        if _cached is not None and now - _cached[0] < COUNT_CACHE_S:
            return _cached[1], _cached[2]
    live = (
        Node.objects.filter(state__in=[Node.State.UP, Node.State.DRAINING])
        .exclude(credential_digest="")
        .count()
    )
    budget = market_policy_cached().agent_report_budget_rps
    with _lock:
        _cached = (now, live, budget)
    return live, budget


def forget() -> None:
    """Drop the cached count (tests; a policy change is seen within COUNT_CACHE_S anyway)."""
    global _cached, _fence
    with _lock:
        _cached = _fence = None


def answer_fence() -> int:
    """The newest round's id for an answer, read at most every FENCE_CACHE_S per process. The agent does not
    act on it (each command carries its own fence, checked by the agent); it is there for the operator's
    eye, so one read a second serves every report instead of one read each."""
    global _fence
    now = time.monotonic()
    with _lock:
        if _fence is not None and now - _fence[0] < FENCE_CACHE_S:
            return _fence[1]
    fence = current_fence()
    with _lock:
        _fence = (now, fence)
    return fence


def paced_interval(*, live_nodes: int, budget_rps: int) -> float:
    """The fleet's report interval before the stagger: live / budget, between the floor and the ceiling."""
    floor, ceiling = float(settings.AGENT_REPORT_FLOOR_S), float(settings.AGENT_REPORT_CEILING_S)
    return min(ceiling, max(floor, live_nodes / max(budget_rps, 1)))


def pace(rng: random.Random | None = None) -> Pace:
    """What an answer tells its agent: when to report next (staggered) and how long to hold a command poll."""
    live, budget = _fleet()
    base = paced_interval(live_nodes=live, budget_rps=budget)
    draw = (rng or random).uniform(1 - STAGGER, 1 + STAGGER)
    return Pace(report_seconds=round(base * draw, 1), poll_seconds=settings.AGENT_POLL_SECONDS)


def slowest_report_s() -> float:
    """The longest interval any agent may be given: what the node-loss timeout must outlast."""
    return float(settings.AGENT_REPORT_CEILING_S) * (1 + STAGGER)
