"""The console's form to propose a policy version directly, and the trial controls on a version's page and
the versions list (docs/portal.md, docs/policy.md §Versions)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from config.errors import PolicyError
from frontend.views.console_propose import field_of
from market.models import PolicyVersion
from market.selectors.policy_snapshot import policy_snapshot
from market.services.canary import canary_start
from market.services.policy_proposals import policy_version_propose
from market.services.shadow import shadow_start
from tests.conftest import World
from tests.frontend.conftest import login


def _form(client: Client, **changes: str) -> dict[str, Any]:
    """The form as the page fills it (the policy in force), with `changes` typed over it."""
    page = client.get("/console/versions/new/")
    assert page.status_code == 200
    from frontend.views.console_propose import initial

    return {**initial(policy_snapshot()), "nonce": "n-1", "reason": "more for beta", **changes}


def test_the_form_proposes_only_what_changed_and_once(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    before = policy_snapshot()
    client = login(Client(), world.admin)
    form = _form(client, **{"weight-beta": "9", "guarantee-beta-H100": "2", "market-price_step_bp": "250",
                            "max-A100": "13", "guardrail-alpha": "500"})  # fmt: skip
    done = client.post("/console/versions/new/", form)
    version = PolicyVersion.objects.get(kind="proposed")
    assert done.status_code == 302 and done["Location"] == f"/console/versions/{version.number}/"
    snap = version.snapshot
    assert snap["tenants"]["beta"]["weight"] == 9 and snap["tenants"]["beta"]["guarantees"] == {"H100": 2}
    assert snap["tenants"]["alpha"]["guardrail"] == 500_000_000
    assert snap["market"]["price_step_bp"] == 250 and snap["gpu_types"]["A100"]["max_price"] == 13_000_000
    assert version.reason == "more for beta" and policy_snapshot() == before

    assert client.post("/console/versions/new/", form).status_code == 302  # the same form sent again
    assert PolicyVersion.objects.filter(kind="proposed").count() == 1


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"weight-beta": "0"}, "weight-beta", "must be between 1 and"),
        ({"weight-beta": "lots"}, "weight-beta", "must be a whole number"),
        ({"guarantee-beta-H100": "9"}, "guarantees-H100", "would total 9 GPUs but the cluster has 8"),
        ({"guarantee-alpha-H100": "5", "guarantee-beta-H100": "5"}, "guarantees-H100", "total 10 GPUs"),
        ({"reserve-H100": "30"}, "max-H100", ""),
        ({"market-price_step_bp": "-1"}, "market-price_step_bp", ""),
        ({"guardrail-gamma": "abc"}, "guardrail-gamma", ""),
        ({"weight-beta": "5", "reason": "  "}, "reason", "say why"),
        ({}, "form", "nothing changed"),
    ],
)
def test_bad_input_is_an_error_beside_its_field(
    world: World, changes: dict[str, str], field: str, message: str
) -> None:
    world.nodes(world.h100, 1, size=8)
    client = login(Client(), world.admin)
    r = client.post("/console/versions/new/", _form(client, **changes))
    assert r.status_code == 400
    html = r.content.decode()
    assert message in html
    if field != "form":
        assert f'id="id_{field}-error"' in html  # beside its field, not a page-wide message
    assert not PolicyVersion.objects.filter(kind="proposed").exists()


def test_refusal_paths_map_to_fields() -> None:
    cases = {
        "snapshot.tenants.beta.weight": "weight-beta",
        "snapshot.tenants.beta.guardrail": "guardrail-beta",
        "snapshot.tenants.beta.guarantees.H100": "guarantee-beta-H100",
        "snapshot.guarantees.H100": "guarantees-H100",
        "snapshot.gpu_types.H100.reserve_price": "reserve-H100",
        "snapshot.gpu_types.H100.max_price": "max-H100",
        "snapshot.market.round_seconds": "market-round_seconds",
        "reason": "reason",
        "snapshot.tenants.zeta": "form",
    }
    assert {path: field_of(PolicyError(path, "no"))[0] for path in cases} == cases
    assert field_of(PolicyError("snapshot.tenants.zeta", "is not an active tenant"))[1] == (
        "snapshot.tenants.zeta: is not an active tenant"
    )


def test_only_admins_propose(world: World) -> None:
    client = login(Client(), world.alice)
    assert client.get("/console/versions/new/").status_code == 403
    assert client.post("/console/versions/new/", {"weight-beta": "9", "reason": "x"}).status_code == 403


def test_a_drafts_page_and_the_list_show_its_trials(world: World) -> None:
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}}, reason="d"
    )
    client = login(Client(), world.admin)
    page = client.get(f"/console/versions/{draft.number}/").content.decode()
    assert "Run in shadow" in page and f"/console/shadow/{draft.number}/start/" in page
    assert f"/console/canaries/new/?version={draft.number}" in page and "Start a canary of version" in page

    r = client.post(f"/console/shadow/{draft.number}/start/")
    assert r.status_code == 302 and r["Location"] == f"/console/shadow/{draft.number}/"
    page = client.get(f"/console/versions/{draft.number}/").content.decode()
    assert "Stop shadow" in page and "Running in shadow since" in page
    listed = client.get("/console/versions/").content.decode()
    assert "in shadow" in listed and "/console/versions/new/" in listed

    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], reason="beta first")
    listed = client.get("/console/versions/").content.decode()
    assert "canary running" in listed and f"/console/canaries/{canary.pk}/" in listed
    applied = client.get("/console/versions/1/").content.decode()
    assert "Run in shadow" not in applied  # only drafts run in shadow


def test_a_second_shadow_start_from_the_page_is_refused_with_a_message(world: World) -> None:
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}}, reason="d"
    )
    shadow_start(actor=world.admin, version=draft)
    client = login(Client(), world.admin)
    r = client.post(f"/console/shadow/{draft.number}/start/", follow=True)
    assert b"already runs in shadow" in r.content
