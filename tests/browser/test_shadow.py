"""The console's shadow rounds pages after real rounds with a proposed version in shadow: the versions list
with start/stop, and a version's accumulated differences and rounds."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from market.models import ShadowRound
from market.services.rounds import round_tick
from market.services.shadow import shadow_start
from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.market.round_helpers import make_job
from tests.market.shadow_helpers import propose


def test_shadow_console_shows_a_versions_differences_and_stops_it(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    for tenant, user in ((world.alpha, world.alice), (world.beta, world.bob)):
        world.fund(tenant, 2000)
        for i in range(16):
            make_job(tenant, user, gpus=1, limits={world.h100: 3}, name=f"{tenant.slug}-{i}", hours=4)
    version = propose(world, weights={"alpha": 10})
    idle = propose(world, min_runtime_s=60)  # proposed, not in shadow
    shadow_start(actor=world.admin, version=version)
    start = timezone.now()
    for r in range(3):  # a new node of 8 H100s before each round: each round has GPUs to hand out
        world.nodes(world.h100, 1, size=8)
        rnd = round_tick(now=start + timedelta(seconds=300 * r))
        assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    assert ShadowRound.objects.filter(version=version).count() == 3

    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/shadow/")
    rows = page.locator("#shadow-versions tbody tr")
    assert rows.count() == 2
    running = rows.filter(has_text=str(version))
    assert "running" in running.inner_text() and "Stop shadow" in running.inner_text()
    assert "Run in shadow" in rows.filter(has_text=str(idle)).inner_text()
    shot(page, tmp_path, "shadow-list")
    running.get_by_role("link").click()

    page.wait_for_selector("#shadow-totals")
    assert page.locator("h1").inner_text() == f"Shadow of policy version {version.number} (proposed draft)"
    totals = page.locator("#shadow-totals")
    won_alone = totals.locator("tr", has_text="on this side only").locator("td")
    assert int(won_alone.nth(1).inner_text()) > 0  # bids alpha wins only under the proposal
    alpha = page.locator("#shadow-tenants tbody tr", has_text="alpha")
    assert int(alpha.locator("td").first.inner_text()) > 0  # gained
    assert page.locator("#shadow-rounds tbody tr").count() == 3
    first = page.locator("#shadow-rounds tbody tr").last.inner_text()  # the first round
    assert "alpha: " in first and "won only under the proposal" in first  # what changed, in words
    assert "won only under the proposal" in alpha.locator("[data-field=differs]").inner_text()
    shot(page, tmp_path, "shadow-version", docs=True)

    page.get_by_role("button", name="Stop shadow").click()
    page.wait_for_load_state()
    assert "Shadow stopped" in page.locator(".message").first.inner_text()
    assert "off" in page.locator("dl.facts").inner_text()
