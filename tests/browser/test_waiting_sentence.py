"""A new user's first sight of a waiting job when the GPUs are simply busy: the job page names the real cause
with the round's figures (every H100 in use, by tier), not a price that would have won."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from market.models import BidOutcome
from market.services.guarantees import guarantee_set
from market.services.rounds import round_tick
from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.market.round_helpers import make_job


def test_a_job_waiting_for_busy_gpus_says_they_are_in_use(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    world.nodes(world.h100, 1, size=8)
    for tenant in (world.alpha, world.beta):
        world.fund(tenant, 1000)
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=8)
    make_job(world.alpha, world.amy, gpus=8, limits={world.h100: 3}, name="alpha-8", age_s=10)
    waiting = make_job(world.beta, world.bea, gpus=2, limits={world.h100: 10}, name="beta-2")
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    assert BidOutcome.objects.get(job=waiting).reason == "busy"
    login(page, live_server.url, "bea")
    page.goto(f"{live_server.url}/t/beta/jobs/{waiting.pk}/")
    reason = page.locator("td.reason").first.inner_text()
    assert reason.startswith("Waiting for free H100 GPUs: in round")
    assert "8 H100 GPUs were in use (8 guaranteed, 0 borrowed, 0 spot)" in reason
    assert "?" not in reason and "would have won" not in reason
    shot(page, tmp_path, "job-waiting-busy", docs=True)
