"""The console's policy versions and canaries in a real browser: the list, a version's diff against the policy
in force, "revert to this version", and a canary started from the form (docs/portal.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from market.models import CanaryState, PolicyCanary
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_proposals import policy_version_propose
from tests.browser.helpers import login, shot
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_list_diff_and_revert(world: World, live_server: Any, page: Any, tmp_path: Path) -> None:
    policy_update(actor=world.admin, price_step_bp=250, reason="calmer prices")
    tenant_policy_update(
        actor=world.admin, tenant=world.beta, weight=6, guarantees={"H100": 2}, reason="beta's new team"
    )
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/versions/")
    rows = page.locator("table.data tbody tr")
    assert rows.count() == 3
    assert "in force" in rows.first.inner_text() and "beta's new team" in rows.first.inner_text()
    shot(page, tmp_path, "policy-versions", docs=True)

    page.click("table.data tbody tr:last-child th a")  # version 1, the policy as it stood
    diff = page.locator("#diff tbody tr")
    assert {diff.nth(i).locator("th").inner_text() for i in range(diff.count())} == {
        "market.price_step_bp",
        "tenants.beta.guarantees.H100",
        "tenants.beta.weight",
    }
    page.fill("#id_reason", "back to the start")
    shot(page, tmp_path, "policy-version-diff", docs=True)
    page.click("text=Revert to version 1")
    page.wait_for_load_state()
    assert "Reverted to version 1: version 4 is now in force." in page.locator("main").inner_text()
    newest = current_version()
    assert newest is not None and newest.kind == "revert" and newest.reason == "back to the start"
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 2


def test_canary_start_and_status(world: World, live_server: Any, page: Any, tmp_path: Path) -> None:
    draft = policy_version_propose(
        actor=world.admin,
        snapshot={"tenants": {"beta": {"weight": 9}, "gamma": {"weight": 1}}},
        reason="more for beta",
    )
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/versions/{draft.number}/")
    page.click(f"text=Start a canary of version {draft.number}")
    page.wait_for_load_state()
    assert page.locator("#id_version").input_value() == str(draft.number)
    page.check("input[name=tenants][value=beta]")
    page.fill("#id_duration_min", "120")
    page.select_option("#id_on_expiry", "promote")
    page.fill("#id_min_compliance_pct", "80")
    page.fill("#id_max_failed_rounds", "0")
    page.fill("#id_max_preemptions_per_hour", "10")
    page.fill("#id_reason", "beta first")
    shot(page, tmp_path, "policy-canary-form", docs=True)
    page.click("text=Start canary")
    page.wait_for_load_state()
    assert page.locator("#canary-state").inner_text() == "Running"
    assert "tenants.beta.weight" in page.locator("main").inner_text()
    canary = PolicyCanary.objects.get()
    assert canary.tenants == ["beta"] and canary.min_compliance_pct == 80
    snapshot = policy_snapshot()
    assert snapshot["tenants"]["beta"]["weight"] == 9 and snapshot["tenants"]["gamma"]["weight"] == 3
    shot(page, tmp_path, "policy-canary", docs=True)
    page.fill("#id_end_reason", "seen enough")
    page.click("text=End and revert")
    page.wait_for_load_state()
    assert page.locator("#canary-state").inner_text() == "Reverted"
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED and policy_snapshot()["tenants"]["beta"]["weight"] == 2


def test_applying_a_draft_says_applied_and_which_version_is_in_force(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    """Issue 37 §5: applying a draft is not labelled a revert, and the draft stops reading as one in shadow."""
    from market.services.shadow import shadow_start

    policy_update(actor=world.admin, price_step_bp=250, reason="calmer prices")
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}}, reason="more for beta"
    )
    shadow_start(actor=world.admin, version=draft)
    login(page, live_server.url, "root")
    page.goto(f"{live_server.url}/console/versions/{draft.number}/")
    page.fill("#id_reason", "beta's results are in")
    page.click(f"text=Apply version {draft.number} to everyone")
    page.wait_for_load_state()
    applied = current_version()
    assert applied is not None and applied.kind == "apply"
    main = page.locator("main").inner_text()
    assert (
        f"Applied draft version {draft.number} to everyone: version {applied.number} is now in force." in main
    )
    row = page.locator("table.data tbody tr").first
    assert "Draft applied" in row.inner_text() and "in force" in row.inner_text()
    draft_row = page.locator("table.data tbody tr", has_text="more for beta")
    assert "applied" in draft_row.inner_text() and "in shadow" not in draft_row.inner_text()
    shot(page, tmp_path, "policy-versions-applied", docs=True)
    page.goto(f"{live_server.url}/console/versions/{draft.number}/")
    heading = page.locator("h1").inner_text()
    assert f"applied to everyone as version {applied.number}" in heading and "draft)" not in heading
    shot(page, tmp_path, "policy-version-applied", docs=True)
