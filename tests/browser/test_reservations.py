"""A waiting gang's page says what it waits for (reserved nodes, expected start), a backfilled job's page says
it may be preempted if it runs past its prediction, and the console's fairness page shows the reservations
with their backfill and free GPUs beside whole free nodes (issue 34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from market.models import Lease
from market.selectors.policy import market_policy
from market.services.leases import lease_running
from market.services.rounds import round_tick
from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.market.round_helpers import make_job
from tests.market.test_reservations import _next_round


def test_reserved_gang_backfill_and_fragmentation(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 5000)
    policy = market_policy()
    policy.min_runtime_s, policy.starve_rounds, policy.fair_reclaim = 0, 0, False
    policy.save()
    beta = [
        make_job(world.beta, world.bea, gpus=4, limits={world.h100: 6}, hours=10, name=f"b{i}")
        for i in range(2)
    ]
    r1 = round_tick()
    assert r1 is not None and r1.winners == 2
    third = make_job(world.beta, world.bea, gpus=4, limits={world.h100: 6}, hours=2, name="b2")
    r2 = _next_round(r1)
    for job in [*beta, third]:
        lease_running(lease_id=job.leases.get().pk)
    gang = make_job(world.alpha, world.amy, gpus=8, limits={world.h100: 6}, hours=5, name="gang")
    r3 = _next_round(r2)
    short = make_job(world.gamma, world.cara, gpus=2, limits={world.h100: 6}, hours=1, name="short")
    _next_round(r3)
    assert Lease.objects.get(job=short).backfill

    login(page, live_server.url, "amy")
    page.goto(f"{live_server.url}/t/alpha/jobs/{gang.pk}/")
    text = page.locator("[data-field=placement]").inner_text()
    assert text.startswith("Waiting for 1 whole node; reserved ") and "expected start" in text
    shot(page, tmp_path, "job-reserved", docs=True)

    page.context.clear_cookies()
    login(page, live_server.url, "cara")
    page.goto(f"{live_server.url}/t/gamma/jobs/{short.pk}/")
    text = page.locator("[data-field=placement]").inner_text()
    assert "backfill" in text and "runs past its predicted end" in text
    shot(page, tmp_path, "job-backfilled", docs=True)

    page.context.clear_cookies()
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/fairness/?window=1d")
    table = page.locator("[data-field=reservations]").inner_text()
    assert f"job {gang.pk} (alpha)" in table and "(gamma)" in table
    assert page.locator("svg.chart[aria-label^='H100: free GPUs beside whole free nodes']").count() == 1
    page.locator("#reservations-h").scroll_into_view_if_needed()
    shot(page, tmp_path, "fairness-reservations", docs=True)
