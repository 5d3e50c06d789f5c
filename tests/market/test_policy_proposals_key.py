"""policy_version_propose's `detail` and `key` (docs/policy.md §Versions): where a draft came from, and a
resent console form proposing once."""

from __future__ import annotations

import pytest

from config.errors import PolicyError
from market.models import PolicyVersion
from market.services.policy_proposals import policy_version_propose
from tests.conftest import World


def test_a_key_proposes_once_and_keeps_the_detail(world: World) -> None:
    def send() -> PolicyVersion:
        return policy_version_propose(
            actor=world.admin,
            snapshot={"tenants": {"beta": {"weight": 9}}},
            reason="r",
            detail={"whatif_run": 4},
            key="console:n-1",
        )

    first = send()
    # The digest of the request (config/idempotency.request_digest) tells a resend from another proposal.
    assert first.detail == {"whatif_run": 4, "key": "console:n-1", "digest": first.detail["digest"]}
    assert send().pk == first.pk and PolicyVersion.objects.filter(kind="proposed").count() == 1
    other = policy_version_propose(actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}})
    assert other.pk != first.pk  # without a key every call is a draft of its own


def test_a_key_reused_for_another_source_or_malformed_is_refused(world: World) -> None:
    policy_version_propose(actor=world.admin, snapshot={}, detail={"whatif_run": 4}, key="k")
    with pytest.raises(PolicyError) as exc:
        policy_version_propose(actor=world.admin, snapshot={}, detail={"whatif_run": 5}, key="k")
    assert exc.value.field == "key"
    with pytest.raises(PolicyError) as exc:
        policy_version_propose(actor=world.admin, snapshot={}, key="x" * 201)
    assert exc.value.field == "key"
    assert PolicyVersion.objects.filter(kind="proposed").count() == 1


def test_the_api_takes_an_idempotency_key(world: World) -> None:
    api = world.client(world.admin, tenant=world.alpha)
    body = {"snapshot": {"tenants": {"beta": {"weight": 9}}}, "reason": "more for beta"}
    first = api.post("/api/v1/policy/versions", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/v1/policy/versions", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert first.json()["number"] == again.json()["number"]
    bad = api.post("/api/v1/policy/versions", body, format="json", HTTP_IDEMPOTENCY_KEY="x" * 201)
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["fields"]
    assert PolicyVersion.objects.filter(kind="proposed").count() == 1
