"""The policies the simulator compares; each turns the current state into one round's decision."""

from __future__ import annotations

from collections.abc import Callable

from allocator.sim.policies.base import Policy
from allocator.sim.policies.fifo import PooledFifo, StaticQuota
from allocator.sim.state import SimState

Factory = Callable[[SimState], Policy]


def _market(state: SimState) -> Policy:
    from allocator.sim.policies.market import Market  # imports the allocator only when asked for

    return Market(state)


def _auction(state: SimState) -> Policy:
    from allocator.sim.policies.market import PureAuction

    return PureAuction(state)


POLICIES: dict[str, Factory] = {
    "market": _market,
    "static": StaticQuota,
    "pooled-fifo": PooledFifo,
    "pure-auction": _auction,
}
