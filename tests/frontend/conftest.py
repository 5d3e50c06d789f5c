"""A market with history for the portal's view tests: nodes, funded tenants, one round with a winner and a
loser in alpha, and an allowance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import World


@dataclass
class Market:
    world: World
    winner: Any  # alpha job that won the round
    loser: Any  # alpha job below the reserve price
    round: Any


@pytest.fixture
def market(world: World) -> Market:
    from market.models import Job
    from market.services.rounds import round_tick
    from tests.market.round_helpers import make_job

    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    winner = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 3}, name="winner")
    loser = make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 1}, name="loser")
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    return Market(world, Job.objects.get(pk=winner.pk), Job.objects.get(pk=loser.pk), rnd)


def login(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client
