"""Policy versions and canaries API (docs/policy.md §Versions, §Canary)."""

from __future__ import annotations

from typing import Any

import pytest

from market.models import PolicyCanary, PolicyVersion
from market.selectors.policy_snapshot import policy_snapshot

BASE = "/api/v1/policy"


@pytest.fixture
def admin(world: Any) -> Any:
    return world.client(world.admin, tenant=world.alpha)


def test_a_patch_with_a_reason_makes_a_version_listed_with_it(world, admin):
    r = admin.patch(BASE, {"price_step_bp": 250, "reason": "calmer prices"}, format="json")
    assert r.status_code == 200, r.json()
    listed = admin.get(f"{BASE}/versions").json()
    assert listed["count"] == 2
    newest = listed["results"][0]
    assert (newest["number"], newest["kind"], newest["reason"], newest["parent"]) == (
        2,
        "change",
        "calmer prices",
        1,
    )
    assert newest["actor"] == "root"
    first = admin.get(f"{BASE}/versions/1").json()
    assert first["current"] == 2
    assert first["diff"] == [{"path": "market.price_step_bp", "old": 250, "new": 500}]


def test_propose_revert_and_retry(world, admin):
    r = admin.post(
        f"{BASE}/versions",
        {"snapshot": {"tenants": {"beta": {"weight": 9}}}, "reason": "more for beta"},
        format="json",
    )
    assert r.status_code == 201, r.json()
    draft = r.json()
    assert draft["status"] == "proposed" and draft["diff"] == [
        {"path": "tenants.beta.weight", "old": 2, "new": 9}
    ]
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 2

    url = f"{BASE}/versions/{draft['number']}/revert"
    first = admin.post(url, {"reason": "apply it"}, format="json", HTTP_IDEMPOTENCY_KEY="abc")
    assert first.status_code == 200, first.json()
    assert first.json()["changed"] and policy_snapshot()["tenants"]["beta"]["weight"] == 9
    again = admin.post(url, {"reason": "apply it"}, format="json", HTTP_IDEMPOTENCY_KEY="abc")
    assert again.json()["replayed"] and again.json()["version"] == first.json()["version"]
    # Applying a draft is a version of kind apply, not revert (issue 37 §5).
    assert PolicyVersion.objects.filter(kind="apply").count() == 1
    assert not PolicyVersion.objects.filter(kind="revert").exists()


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("versions", {"snapshot": {"tenants": {"beta": {"weight": 0}}}}, "snapshot.tenants.beta.weight"),
        ("versions", {"snapshot": {"market": {"round_seconds": 1}}}, "snapshot.market.round_seconds"),
        ("versions", {"snapshot": "all of it"}, "snapshot"),
        ("versions", {"snapshot": {}, "colour": 1}, "colour"),
        ("versions", {"snapshot": {}, "reason": 5}, "reason"),
        ("canaries", {"version": 999, "tenants": ["beta"]}, "version"),
        ("canaries", {"version": 1, "tenants": ["zeta"]}, "tenants"),
        ("canaries", {"version": 1, "tenants": ["beta"], "duration_s": 1}, "duration_s"),
        ("canaries", {"version": 1, "tenants": ["beta"], "min_compliance_pct": 500}, "min_compliance_pct"),
        ("canaries", {"version": 1, "tenants": ["beta"], "on_expiry": "later"}, "on_expiry"),
        ("canaries", {"version": "one"}, "version"),
        ("versions/1/revert", {"reason": "x" * 1001}, "reason"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(world, admin, url, body, field):
    admin.patch(BASE, {"price_step_bp": 250}, format="json")  # versions 1 and 2
    r = admin.post(f"{BASE}/{url}", body, format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json()["fields"], r.json()


def test_canary_start_status_promote(world, admin):
    draft = admin.post(
        f"{BASE}/versions",
        {"snapshot": {"tenants": {"beta": {"weight": 9}, "alpha": {"weight": 4}}}},
        format="json",
    ).json()
    r = admin.post(
        f"{BASE}/canaries",
        {"version": draft["number"], "tenants": ["beta"], "duration_s": 3600, "on_expiry": "promote",
         "max_failed_rounds": 0, "reason": "beta first"},
        format="json",
    )  # fmt: skip
    assert r.status_code == 201, r.json()
    canary = r.json()
    assert (
        canary["state"] == "running"
        and canary["tenants"] == ["beta"]
        and canary["version"] == draft["number"]
    )
    assert policy_snapshot()["tenants"]["alpha"]["weight"] == 1
    assert admin.get(f"{BASE}/canaries/{canary['id']}").json()["base"] == draft["parent"]
    assert admin.get(f"{BASE}/canaries").json()["count"] == 1
    promoted = admin.post(f"{BASE}/canaries/{canary['id']}/promote", {"reason": "fine"}, format="json")
    assert promoted.status_code == 200 and promoted.json()["state"] == "promoted"
    assert policy_snapshot()["tenants"]["alpha"]["weight"] == 4
    again = admin.post(f"{BASE}/canaries/{canary['id']}/end", {}, format="json")
    assert again.status_code == 409 and again.json()["error"] == "canary_conflict"
    assert admin.get(f"{BASE}/canaries/999").status_code == 404
    assert admin.get(f"{BASE}/versions/999").status_code == 404


def test_only_admins(world):
    client = world.client(world.alice)
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("get", f"{BASE}/versions", None),
        ("post", f"{BASE}/versions", {"snapshot": {}}),
        ("get", f"{BASE}/versions/1", None),
        ("post", f"{BASE}/versions/1/revert", {}),
        ("get", f"{BASE}/canaries", None),
        ("post", f"{BASE}/canaries", {"version": 1}),
        ("post", f"{BASE}/canaries/1/promote", {}),
        ("post", f"{BASE}/canaries/1/end", {}),
    ]
    for method, url, body in calls:
        r = getattr(client, method)(url, body, format="json") if body is not None else client.get(url)
        assert r.status_code == 403, (url, r.status_code)
    assert not PolicyVersion.objects.exists() and not PolicyCanary.objects.exists()
