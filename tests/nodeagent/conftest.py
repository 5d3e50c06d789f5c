"""A node registered through the agent API running one 2-GPU job of alpha's."""

from __future__ import annotations

import pytest

from tests.market.round_helpers import make_job
from tests.nodeagent.agents import leased, register


@pytest.fixture
def running(world):
    world.fund(world.alpha, 1000)
    agent = register(world, "n1")
    job = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 5}, hours=1)
    lease = leased(job)
    assert agent.post(f"leases/{lease.pk}/started", {}).json()["state"] == "running"
    return world, agent, job, lease
