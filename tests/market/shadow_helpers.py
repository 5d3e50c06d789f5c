"""Shared by the shadow round tests: a proposed policy version, and a round with a known difference."""

from __future__ import annotations

from typing import Any

from market.models import PolicyVersion
from market.selectors.policy_snapshot import PolicySnapshot, policy_snapshot
from market.services.policy_proposals import policy_version_propose
from tests.conftest import World
from tests.market.round_helpers import make_job


def propose(world: World, *, weights: dict[str, int] | None = None, **market: int) -> PolicyVersion:
    """A proposed version: today's policy with these tenants' weights and market knobs changed."""
    snapshot: PolicySnapshot = policy_snapshot()
    for slug, weight in (weights or {}).items():
        snapshot["tenants"][slug]["weight"] = weight
    snapshot["market"].update(market)
    return policy_version_propose(actor=world.admin, snapshot=snapshot, reason="a test proposal")


def contended(world: World) -> dict[str, list[Any]]:
    """One node of 8 H100s, alpha (weight 1) and beta (weight 2) each bidding for 8 single GPUs above the
    posted price: live, the excess is split 1:2, so alpha loses bids that a weight of 10 would win."""
    world.nodes(world.h100, 1, size=8)
    jobs: dict[str, list[Any]] = {}
    for tenant, user in ((world.alpha, world.alice), (world.beta, world.bob)):
        world.fund(tenant, 1000)
        jobs[tenant.slug] = [make_job(tenant, user, gpus=1, limits={world.h100: 3}) for _ in range(8)]
    return jobs
