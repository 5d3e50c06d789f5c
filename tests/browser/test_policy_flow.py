"""Issue 27's loop in a real browser: a finished what-if saved as a proposed version, run in shadow against
a live round, its differences read, then a canary of it on one team, ended by hand (docs/portal.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from market.models import CanaryState, PolicyCanary, PolicyVersion, ShadowRound
from market.selectors.policy_snapshot import policy_snapshot
from market.services.rounds import round_tick
from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.market.round_helpers import make_job
from tests.whatif.helpers import proposal
from whatif.models import WhatIfRun, WhatIfState
from whatif.policy import today_policy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _finished_run(world: World) -> WhatIfRun:
    """A what-if as the replay task leaves it: alpha's weight 1 -> 10 (the figures are the page's to show,
    not this test's to check; tests/browser/test_whatif.py runs a real replay)."""

    def tenants(alpha_queue_s: float) -> dict[str, dict[str, float]]:
        return {
            "alpha": {"completed": 14, "avg_queue_s": alpha_queue_s},
            "beta": {"completed": 16, "avg_queue_s": 300.0},
        }

    figures = {
        "completed": 30,
        "rejected": 2,
        "avg_queue_s": 900.0,
        "preemptions": 1,
        "per_tenant": tenants(1500.0),
    }
    better = {**figures, "completed": 31, "avg_queue_s": 600.0, "per_tenant": tenants(900.0)}
    now = timezone.now()
    return WhatIfRun.objects.create(
        created_by=world.admin,
        since=now - timedelta(days=7),
        until=now,
        baseline=today_policy(),
        proposal=proposal(tenants__alpha__weight=10),
        state=WhatIfState.DONE,
        progress=1.0,
        finished_at=now,
        result={
            "summaries": {"today": figures, "proposal": better},
            "actual": {},
            "notes": ["from history", "stored for the test"],
        },
    )


def test_whatif_to_shadow_to_canary(world: World, live_server: Any, page: Any, tmp_path: Path) -> None:
    for tenant, user in ((world.alpha, world.alice), (world.beta, world.bob)):
        world.fund(tenant, 2000)
        for i in range(16):
            make_job(tenant, user, gpus=1, limits={world.h100: 3}, name=f"{tenant.slug}-{i}", hours=4)
    run = _finished_run(world)
    login(page, live_server.url, "root")

    # 1. the what-if's proposal becomes a draft version
    page.goto(f"{live_server.url}/console/whatif/{run.pk}/")
    assert page.locator("#id_propose_reason").input_value() == f"what-if run {run.pk}"
    shot(page, tmp_path, "flow-whatif-run", docs=True)
    page.get_by_role("button", name="Save as proposed version").click()
    page.wait_for_load_state()
    version = PolicyVersion.objects.get(kind="proposed")
    assert page.locator("h1").inner_text().startswith(f"Policy version {version.number}")
    assert f"what-if run {run.pk}" in page.locator("dl.facts").inner_text()
    assert "tenants.alpha.weight" in page.locator("#diff").inner_text()
    shot(page, tmp_path, "flow-version", docs=True)

    # 2. in shadow: one live round cleared again under it
    page.get_by_role("button", name="Run in shadow").click()
    page.wait_for_load_state()
    assert "Shadow started" in page.locator(".message").first.inner_text()
    world.nodes(world.h100, 1, size=8)
    rnd = round_tick(now=timezone.now())
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    assert ShadowRound.objects.filter(version=version).count() == 1
    page.reload()
    alpha = page.locator("#shadow-tenants tbody tr", has_text="alpha")
    assert int(alpha.locator("td").first.inner_text()) > 0  # bids alpha wins only under the proposal
    assert page.locator("#shadow-rounds tbody tr").count() == 1
    shot(page, tmp_path, "flow-shadow", docs=True)

    page.goto(f"{live_server.url}/console/versions/")
    row = page.locator("table.data tbody tr", has_text=f"what-if run {run.pk}")
    assert "in shadow" in row.inner_text()

    # 3. a canary of it on alpha, from the draft's page
    page.goto(f"{live_server.url}/console/versions/{version.number}/")
    assert "Running in shadow since" in page.locator("#version-trial").inner_text()
    page.click(f"text=Start a canary of version {version.number}")
    page.wait_for_load_state()
    assert page.locator("#id_version").input_value() == str(version.number)
    page.check("input[name=tenants][value=alpha]")
    page.fill("#id_duration_min", "60")
    page.fill("#id_reason", "alpha first")
    page.get_by_role("button", name="Start canary").click()
    page.wait_for_load_state()
    assert page.locator("#canary-state").inner_text() == "Running"
    assert policy_snapshot()["tenants"]["alpha"]["weight"] == 10
    shot(page, tmp_path, "flow-canary", docs=True)

    page.goto(f"{live_server.url}/console/versions/")
    assert "canary running" in page.locator("table.data").inner_text()
    shot(page, tmp_path, "flow-versions", docs=True)

    # 4. ended by hand: alpha's weight is back, one audited click
    canary = PolicyCanary.objects.get()
    page.goto(f"{live_server.url}/console/canaries/{canary.pk}/")
    page.fill("#id_end_reason", "seen enough")
    page.click("text=End and revert")
    page.wait_for_load_state()
    assert page.locator("#canary-state").inner_text() == "Reverted"
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED and policy_snapshot()["tenants"]["alpha"]["weight"] == 1
    shot(page, tmp_path, "flow-canary-ended")


def test_propose_form_errors_then_a_draft(world: World, live_server: Any, page: Any, tmp_path: Path) -> None:
    world.nodes(world.h100, 1, size=8)
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/versions/")
    page.click("text=Propose a version")
    page.wait_for_load_state()
    assert page.locator("#id_weight-beta").input_value() == "2"  # starts from the policy in force
    page.fill("#id_weight-beta", "0")
    page.fill("#id_guarantee-beta-H100", "9")
    page.fill("#id_reason", "more for beta")
    page.get_by_role("button", name="Propose this version").click()
    page.wait_for_load_state()
    assert "must be between 1 and" in page.locator("#id_weight-beta-error").inner_text()
    page.fill("#id_weight-beta", "6")
    page.get_by_role("button", name="Propose this version").click()
    page.wait_for_load_state()
    assert "the cluster has 8" in page.locator("#id_guarantees-H100-error").inner_text()
    shot(page, tmp_path, "policy-propose-form", docs=True)
    page.fill("#id_guarantee-beta-H100", "4")
    page.get_by_role("button", name="Propose this version").click()
    page.wait_for_load_state()
    version = PolicyVersion.objects.get(kind="proposed")
    assert page.locator("h1").inner_text().startswith(f"Policy version {version.number}")
    assert version.snapshot["tenants"]["beta"] == {**policy_snapshot()["tenants"]["beta"], "weight": 6,
                                                    "guarantees": {"H100": 4}}  # fmt: skip
