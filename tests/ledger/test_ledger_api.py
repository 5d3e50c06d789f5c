"""Ledger API: balance, entries, top-ups and refunds; bad input, idempotency and access."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from accounts.models import ApiToken
from market.models import JournalEntry
from tests.conftest import World
from tests.ledger.factories import fund, hold, settle

pytestmark = pytest.mark.django_db

LEDGER_ENDPOINTS = [
    ("get", "balance"),
    ("get", "ledger"),
    ("post", "topups"),
    ("post", "refunds"),
]


def url(tenant: str, what: str) -> str:
    return f"/api/v1/tenants/{tenant}/{what}"


def topup(client: Any, body: Any, tenant: str = "alpha", **headers: str) -> Any:
    return client.post(url(tenant, "topups"), body, format="json", **headers)


# Balance


def test_balance_in_micro_credits_and_credits(world: World) -> None:
    fund(world.alpha, 12_500_000)
    settle(hold(world.alpha, 2_000_000), 1_250_000)
    hold(world.alpha, 3_000_000)
    resp = world.client(world.amy).get(url("alpha", "balance"))
    assert resp.status_code == 200
    assert resp.json() == {
        "available": 8_250_000,
        "held": 3_000_000,
        "spent": 1_250_000,
        "available_credits": "8.25",
        "held_credits": "3",
        "spent_credits": "1.25",
    }


# Entries


def test_ledger_lists_entries_newest_first_with_postings(world: World) -> None:
    fund(world.alpha, 5_000_000, key="t1")
    hold(world.alpha, 1_000_000, key="h1")
    fund(world.beta, 1, key="other")
    resp = world.client(world.amy).get(url("alpha", "ledger"))
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 2
    first = body["results"][0]
    assert (first["key"], first["kind"], first["amount"], first["amount_credits"]) == (
        "h1",
        "hold",
        1_000_000,
        "1",
    )
    assert first["hold"] == "h1"
    assert sorted((p["account"], p["amount"]) for p in first["postings"]) == [
        ("alpha:available", -1_000_000),
        ("alpha:held", 1_000_000),
    ]


def test_ledger_filters_by_kind_and_dates(world: World) -> None:
    old = fund(world.alpha, 1, key="old")
    JournalEntry.objects.filter(pk=old.pk).update(created_at="2026-01-10T12:00:00Z")
    fund(world.alpha, 2, key="new")
    hold(world.alpha, 1, key="h")
    client = world.client(world.amy)

    def keys(**params: str) -> list[str]:
        resp = client.get(url("alpha", "ledger"), params)
        assert resp.status_code == 200, resp.json()
        return [e["key"] for e in resp.json()["results"]]

    assert keys(kind="topup") == ["new", "old"]
    assert keys(until="2026-01-10") == ["old"]  # a date means through the end of that day
    assert keys(until="2026-01-10T11:59:59Z") == []
    assert keys(until="2026-01-10T12:00:00") == ["old"]  # naive means UTC; until is inclusive
    assert keys(since="2026-01-11", kind="topup") == ["new"]
    assert keys(since="2026-01-10T12:00:00+00:00", until="2026-01-10T12:00:00Z") == ["old"]
    today = timezone.now().date().isoformat()
    assert keys(since=today) == ["h", "new"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"kind": "gift"}, "kind"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-13-01"}, "since"),
        ({"until": "2026-02-30T00:00:00Z"}, "until"),
        ({"since": "2026-02-02", "until": "2026-02-01"}, "until"),
    ],
)
def test_ledger_bad_filters_name_the_field(world: World, params: dict[str, str], field: str) -> None:
    resp = world.client(world.amy).get(url("alpha", "ledger"), params)
    assert resp.status_code == 400
    assert resp.json()["error"] == "invalid"
    assert field in resp.json()["fields"]


# Top-ups


def test_admin_topup_then_replay_then_conflict(world: World) -> None:
    client = world.client(world.admin)
    resp = topup(client, {"amount": "12.5", "key": "grant-1", "memo": "welcome"})
    assert resp.status_code == 201, resp.json()
    entry = resp.json()
    assert (entry["kind"], entry["amount"], entry["actor"], entry["tenant"]) == (
        "topup",
        12_500_000,
        "root",
        "alpha",
    )

    again = topup(client, {"amount": "12.50", "key": "grant-1", "memo": "welcome"})
    assert again.status_code == 200
    assert again.json()["id"] == entry["id"]

    conflict = topup(client, {"amount": "13", "key": "grant-1", "memo": "welcome"})
    assert conflict.status_code == 409
    # The one idempotency rule (config/idempotency.py): 409 idempotency_key_reused naming the key.
    assert conflict.json()["error"] == "idempotency_key_reused" and "key" in conflict.json()["fields"]
    assert JournalEntry.objects.count() == 1
    assert client.get(url("alpha", "balance")).json()["available"] == 12_500_000


def test_topup_key_from_header(world: World) -> None:
    client = world.client(world.admin)
    resp = topup(client, {"amount": "1"}, HTTP_IDEMPOTENCY_KEY="hdr-1")
    assert resp.status_code == 201
    assert resp.json()["key"] == "hdr-1"
    assert topup(client, {"amount": "1"}, HTTP_IDEMPOTENCY_KEY="hdr-1").status_code == 200
    assert JournalEntry.objects.count() == 1


@pytest.mark.parametrize(
    "body, headers",
    [
        ({"amount": "1"}, {}),
        ({"amount": "1", "key": ""}, {}),
        ({"amount": "1", "key": "a"}, {"HTTP_IDEMPOTENCY_KEY": "b"}),
        ({"amount": "1", "key": "k" * 201}, {}),
    ],
    ids=["missing", "blank", "body-header-differ", "too-long"],
)
def test_topup_key_problems(world: World, body: dict[str, Any], headers: dict[str, str]) -> None:
    resp = topup(world.client(world.admin), body, **headers)
    assert resp.status_code == 400
    assert "key" in resp.json()["fields"]
    assert not JournalEntry.objects.exists()


BAD_AMOUNTS = [
    "-1",
    -1,
    "0",
    0,
    "0.0000001",
    1e-7,
    "1.0000005",
    "1e30",
    2**64,
    10**15 + 1,  # credits, not micro-credits: far beyond MAX_AMOUNT
    str(10**9 + 1),  # one credit over MAX_AMOUNT (10**15 micro-credits)
    "1000000000.000001",  # one micro-credit over
    "9" * 400,
    "1e999999999",
    "abc",
    "",
    "12,5",
    "NaN",
    "Infinity",
    "-Infinity",
    True,
    False,
    None,
    [],
    {"value": 1},
]


@pytest.mark.parametrize("amount", BAD_AMOUNTS, ids=[repr(a)[:20] for a in BAD_AMOUNTS])
def test_topup_bad_amounts_are_400_naming_amount(world: World, amount: Any) -> None:
    client = world.client(world.admin)
    before = JournalEntry.objects.count()
    resp = topup(client, {"amount": amount, "key": "k1"})
    assert resp.status_code == 400, resp.json()
    assert resp.json()["error"] == "invalid"
    assert "amount" in resp.json()["fields"]
    assert resp.json()["detail"].startswith("amount:")
    assert JournalEntry.objects.count() == before


def test_topup_missing_amount_or_not_an_object(world: World) -> None:
    client = world.client(world.admin)
    assert "amount" in topup(client, {"key": "k"}).json()["fields"]
    resp = topup(client, [1, 2])
    assert resp.status_code == 400
    assert not JournalEntry.objects.exists()


def test_topup_largest_amount_is_accepted(world: World) -> None:
    resp = topup(world.client(world.admin), {"amount": str(10**9), "key": "max"})
    assert resp.status_code == 201
    assert resp.json()["amount"] == 10**15


@pytest.mark.parametrize("who", ["alice", "amy"])
def test_topup_by_tenant_members_is_403(world: World, who: str) -> None:
    resp = topup(world.client(getattr(world, who)), {"amount": "1", "key": "k"})
    assert resp.status_code == 403
    assert resp.json()["error"] == "permission_denied"
    assert not JournalEntry.objects.exists()


def test_topup_unknown_tenant_is_404(world: World) -> None:
    resp = topup(world.client(world.admin), {"amount": "1", "key": "k"}, tenant="nope")
    assert resp.status_code == 404
    assert resp.json()["error"] == "not_found"
    assert not JournalEntry.objects.exists()


def test_admin_token_is_bound_to_its_tenant(world: World) -> None:
    assert topup(world.client(world.admin), {"amount": "1", "key": "k"}, tenant="beta").status_code == 404
    resp = topup(world.client(world.admin, tenant=world.beta), {"amount": "1", "key": "k"}, tenant="beta")
    assert resp.status_code == 201


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer two parts", "Bearer gpm_not-a-real-token", "Bearer nonsense", "Bearer " + "x" * 500],
    ids=["empty", "two-parts", "unknown", "no-prefix", "huge"],
)
def test_topup_bad_tokens_are_401(world: World, header: str) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    resp = topup(client, {"amount": "1", "key": "k"})
    assert resp.status_code == 401
    assert resp.json()["error"] in ("authentication_failed", "not_authenticated")
    assert not JournalEntry.objects.exists()


def test_topup_with_revoked_token_is_401(world: World) -> None:
    client = world.client(world.admin)
    ApiToken.objects.filter(user=world.admin).update(revoked_at=timezone.now())
    resp = topup(client, {"amount": "1", "key": "k"})
    assert resp.status_code == 401
    assert "revoked" in resp.json()["detail"]
    assert not JournalEntry.objects.exists()


# Refunds


def test_refund_up_to_net_charges(world: World) -> None:
    fund(world.alpha, 10_000_000)
    settle(hold(world.alpha, 5_000_000), 3_000_000)
    client = world.client(world.admin)
    resp = client.post(url("alpha", "refunds"), {"amount": "2", "key": "r1"}, format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["kind"] == "refund"
    too_much = client.post(url("alpha", "refunds"), {"amount": "1.000001", "key": "r2"}, format="json")
    assert too_much.status_code == 409
    assert too_much.json()["error"] == "refund_exceeds_charges"
    assert client.get(url("alpha", "balance")).json()["spent"] == 1_000_000


def test_refund_bad_amount_and_members(world: World) -> None:
    resp = world.client(world.admin).post(
        url("alpha", "refunds"), {"amount": "-2", "key": "r"}, format="json"
    )
    assert resp.status_code == 400
    assert "amount" in resp.json()["fields"]
    resp = world.client(world.alice).post(url("alpha", "refunds"), {"amount": "2", "key": "r"}, format="json")
    assert resp.status_code == 403
    assert not JournalEntry.objects.exists()


# Access on every endpoint


@pytest.mark.parametrize("method, what", LEDGER_ENDPOINTS)
def test_outsider_gets_404(world: World, method: str, what: str) -> None:
    resp = getattr(world.client(world.bob), method)(
        url("alpha", what), {"amount": "1", "key": "k"}, format="json"
    )
    assert resp.status_code == 404
    assert resp.json()["error"] == "not_found"


@pytest.mark.parametrize("method, what", LEDGER_ENDPOINTS)
def test_anonymous_gets_401(world: World, method: str, what: str) -> None:
    resp = getattr(world.client(), method)(url("alpha", what), {"amount": "1", "key": "k"}, format="json")
    assert resp.status_code == 401
    assert resp.json()["error"] == "not_authenticated"


@pytest.mark.parametrize("what", ["balance", "ledger"])
def test_members_may_read(world: World, what: str) -> None:
    for user in (world.alice, world.amy, world.admin):
        assert world.client(user).get(url("alpha", what)).status_code == 200
