"""The one idempotency rule (config/idempotency.py, docs/reliability.md §Idempotency; issue 37 §4), at each
door that takes an Idempotency-Key: the job submit, the spend-alert create, the ledger's top-up, the policy
proposal and revert. The same key and body replay the first answer; the same key and another body are 409
idempotency_key_reused naming the key; the same key in another tenant is another key; a malformed key is a
400 naming it; concurrent duplicates apply once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from config.errors import PolicyError
from config.idempotency import KEY_MAX_CHARS, check_key
from market.models import Job, JournalEntry, PolicyVersion, SpendAlertRule
from market.selectors.policy_versions import current_version
from market.services.policy import policy_update
from tests.concurrency import run_together
from tests.conftest import World


@dataclass(frozen=True)
class Door:
    """One write that takes a key: where to post, a body and another body, who may, and what it makes."""

    url: str  # {slug} is the tenant's
    body: dict[str, Any]
    other: dict[str, Any]
    made: Callable[[], int]  # how many rows the write has made
    admin: bool = False  # platform admins only
    field: str = "Idempotency-Key"  # what a reused key is named as
    tenant_scoped: bool = True


JOB = {"name": "t", "command": "run", "gpus": 1, "bids": [{"gpu_type": "H100", "limit": "5"}], "max_hours": 1}
DOORS = {
    "job-submit": Door("/api/v1/tenants/{slug}/jobs", JOB, {**JOB, "gpus": 2}, lambda: Job.objects.count()),
    "spend-alert": Door(
        "/api/v1/tenants/{slug}/spend-alerts",
        {"kind": "spend_week", "threshold": "100"},
        {"kind": "spend_week", "threshold": "7"},
        lambda: SpendAlertRule.objects.count(),
    ),
    "topup": Door(
        "/api/v1/tenants/{slug}/topups",
        {"amount": "5"},
        {"amount": "6"},
        lambda: JournalEntry.objects.filter(kind="topup").count(),
        admin=True,
        field="key",
    ),
    "propose": Door(
        "/api/v1/policy/versions",
        {"snapshot": {"tenants": {"beta": {"weight": 9}}}, "reason": "r"},
        {"snapshot": {"tenants": {"beta": {"weight": 8}}}, "reason": "r"},
        lambda: PolicyVersion.objects.filter(kind="proposed").count(),
        admin=True,
        tenant_scoped=False,
    ),
}


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    world.fund(world.alpha, 1000)
    world.fund(world.beta, 1000)
    return world


def _client(w: World, door: Door, tenant: str = "alpha") -> APIClient:
    if door.admin:
        return w.client(w.admin, tenant=w.alpha if tenant == "alpha" else w.beta)
    return w.client(w.alice if tenant == "alpha" else w.bob)


def _post(client: APIClient, door: Door, body: dict[str, Any], key: str, slug: str = "alpha") -> Any:
    return client.post(door.url.format(slug=slug), body, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(DOORS))
def test_same_key_same_body_replays_the_first_answer(market: World, name: str) -> None:
    door = DOORS[name]
    client = _client(market, door)
    first = _post(client, door, door.body, "k-1")
    assert first.status_code == 201, first.json()
    made = door.made()
    again = _post(client, door, door.body, "k-1")
    # The first answer's body; its status says whether this call made it (201) or found it (200), except a
    # job submit's and a proposal's, which repeat the first answer's 201 (docs/reliability.md §Idempotency).
    assert again.status_code in (200, 201)
    ident = "id" if "id" in first.json() else "number"
    assert again.json()[ident] == first.json()[ident]
    assert door.made() == made


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(DOORS))
def test_same_key_other_body_is_409_naming_the_key(market: World, name: str) -> None:
    door = DOORS[name]
    client = _client(market, door)
    assert _post(client, door, door.body, "k-1").status_code == 201
    made = door.made()
    other = _post(client, door, door.other, "k-1")
    assert other.status_code == 409, other.json()
    got = other.json()
    assert got["error"] == "idempotency_key_reused"
    assert door.field in got["fields"] and "'k-1' was already used for a different request" in got["detail"]
    assert door.made() == made


@pytest.mark.django_db
@pytest.mark.parametrize("name", [n for n, d in DOORS.items() if d.tenant_scoped])
def test_keys_of_different_tenants_are_independent(market: World, name: str) -> None:
    door = DOORS[name]
    a = _post(_client(market, door, "alpha"), door, door.body, "shared", "alpha")
    b = _post(_client(market, door, "beta"), door, door.other, "shared", "beta")
    assert (a.status_code, b.status_code) == (201, 201), (a.json(), b.json())
    assert a.json()["id"] != b.json()["id"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(DOORS))
@pytest.mark.parametrize("key", ["", "   ", "x" * (KEY_MAX_CHARS + 1), "ключ"])
def test_a_malformed_key_is_400_naming_it(market: World, name: str, key: str) -> None:
    door = DOORS[name]
    before = door.made()
    got = _post(_client(market, door), door, door.body, key)
    assert got.status_code == 400, got.json()
    assert "Idempotency-Key" in got.json()["fields"]
    assert door.made() == before


def test_the_key_rule() -> None:
    assert check_key(None) == check_key("") == ""
    assert check_key("a b~") == "a b~"
    assert check_key("x" * KEY_MAX_CHARS) == "x" * KEY_MAX_CHARS
    for bad in ("x" * (KEY_MAX_CHARS + 1), "  ", "é", "a\tb", 5):
        with pytest.raises(PolicyError) as err:
            check_key(bad)
        assert err.value.field == "Idempotency-Key"
    with pytest.raises(PolicyError):
        check_key("", required=True)


@pytest.mark.django_db
def test_revert_replays_and_refuses_by_the_same_rule(market: World) -> None:
    admin = market.client(market.admin)
    policy_update(actor=market.admin, min_runtime_s=100)
    target = current_version()
    assert target is not None and target.parent is not None
    policy_update(actor=market.admin, min_runtime_s=200)
    url = "/api/v1/policy/versions/{}/revert"
    first = admin.post(url.format(target.number), {"reason": "r"}, format="json", HTTP_IDEMPOTENCY_KEY="rv")
    again = admin.post(url.format(target.number), {"reason": "r"}, format="json", HTTP_IDEMPOTENCY_KEY="rv")
    assert first.status_code == again.status_code == 200, first.json()
    assert again.json()["replayed"] and again.json()["version"] == first.json()["version"]
    other = admin.post(
        url.format(target.parent.number), {"reason": "r"}, format="json", HTTP_IDEMPOTENCY_KEY="rv"
    )
    assert other.status_code == 409 and other.json()["error"] == "idempotency_key_reused"
    assert "Idempotency-Key" in other.json()["fields"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(DOORS))
def test_concurrent_duplicates_apply_once(market: World, name: str) -> None:
    door = DOORS[name]
    n = 6
    clients = [_client(market, door) for _ in range(n)]
    before = door.made()
    results = run_together(lambda i: _post(clients[i], door, door.body, "race"), n)
    assert all(not isinstance(r, Exception) for r in results), results
    assert {r.status_code for r in results} <= {200, 201}, [r.json() for r in results]
    assert door.made() == before + 1
