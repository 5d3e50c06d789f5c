"""Console pages for policy versions and canaries (docs/portal.md); the browser test drives the same flows."""

from __future__ import annotations

from django.test import Client

from market.models import CanaryState, PolicyCanary, PolicyVersion
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_proposals import policy_version_propose
from tests.frontend.conftest import login


def test_list_diff_and_revert_with_a_resent_form(world):
    policy_update(actor=world.admin, price_step_bp=250, reason="calmer")
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=6, reason="beta grows")
    client = login(Client(), world.admin)
    listed = client.get("/console/versions/")
    assert listed.status_code == 200
    assert b"beta grows" in listed.content and b"calmer" in listed.content and b"in force" in listed.content
    detail = client.get("/console/versions/1/")
    assert detail.status_code == 200
    assert b"market.price_step_bp" in detail.content and b"tenants.beta.weight" in detail.content
    form = {"reason": "undo both", "nonce": "n-1"}
    done = client.post("/console/versions/1/revert/", form)
    assert done.status_code == 302
    assert policy_snapshot() == PolicyVersion.objects.get(number=1).snapshot
    count = PolicyVersion.objects.count()
    client.post("/console/versions/1/revert/", form)  # the same form sent again
    assert PolicyVersion.objects.count() == count
    newest = current_version()
    assert newest is not None and (newest.kind, newest.reason) == ("revert", "undo both")
    assert client.get("/console/versions/999/").status_code == 404


def test_canary_form_status_and_end(world):
    draft = policy_version_propose(actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}})
    client = login(Client(), world.admin)
    assert client.get(f"/console/canaries/new/?version={draft.number}").status_code == 200
    bad = client.post("/console/canaries/new/", {"version": draft.number, "duration_min": "x"})
    assert bad.status_code == 200 and b"must be a whole number" in bad.content
    none = client.post("/console/canaries/new/", {"version": draft.number, "on_expiry": "revert"})
    assert b"name at least one tenant" in none.content
    r = client.post(
        "/console/canaries/new/",
        {"version": draft.number, "tenants": ["beta"], "duration_min": "30", "on_expiry": "promote",
         "max_failed_rounds": "0", "window_min": "60", "reason": "beta first"},
    )  # fmt: skip
    canary = PolicyCanary.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/console/canaries/{canary.pk}/"
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 9
    page = client.get(f"/console/canaries/{canary.pk}/")
    assert page.status_code == 200 and b"tenants.beta.weight" in page.content
    client.post(f"/console/canaries/{canary.pk}/end/", {"promote": "0", "reason": "enough"})
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED and policy_snapshot()["tenants"]["beta"]["weight"] == 2
    assert client.post(f"/console/canaries/{canary.pk}/end/", {"promote": "1"}).status_code == 302  # message


def test_members_get_403(world):
    client = login(Client(), world.alice)
    for url in ["/console/versions/", "/console/versions/1/", "/console/canaries/new/"]:
        assert client.get(url).status_code == 403
    assert client.post("/console/versions/1/revert/", {"reason": "x"}).status_code == 403


def test_applying_a_draft_says_applied_and_shows_what_is_in_force(world):
    """Issue 37 §5: a draft applied to everyone is not a "Revert", and no longer reads as a draft in shadow."""
    from accounts.models import AuditEvent
    from market.models import ShadowRun
    from market.services.shadow import shadow_start

    policy_update(actor=world.admin, price_step_bp=250, reason="calmer")
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}}, reason="more for beta"
    )
    shadow_start(actor=world.admin, version=draft)
    client = login(Client(), world.admin)
    done = client.post(
        f"/console/versions/{draft.number}/revert/", {"reason": "go", "nonce": "n-2"}, follow=True
    )
    applied = current_version()
    assert applied is not None and applied.kind == "apply" and applied.parent_id == draft.pk
    text = done.content.decode()
    assert (
        f"Applied draft version {draft.number} to everyone: version {applied.number} is now in force." in text
    )
    assert "Reverted" not in text
    assert AuditEvent.objects.filter(action="policy.apply").count() == 1
    assert not AuditEvent.objects.filter(action="policy.revert").exists()
    assert not ShadowRun.objects.filter(version=draft, stopped_at__isnull=True).exists()  # its shadow stopped
    listed = client.get("/console/versions/").content.decode()
    assert "Draft applied" in listed and "as version <a" in listed and "In force: <a" in listed
    page = client.get(f"/console/versions/{draft.number}/").content.decode()
    assert f"applied to everyone as version {applied.number}" in page
    assert "Apply to everyone again" in page and ", draft)" not in page
    api = world.client(world.admin).get(f"/api/v1/policy/versions/{draft.number}").json()
    assert api["applied_as"] == applied.number and api["current"] == applied.number
