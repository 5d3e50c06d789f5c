"""Hostile input, as a table: every write endpoint against every kind of bad body (issue 19 §1).

Each case must get a 4xx JSON error in the API's shape that names what was wrong (the field, or `body`,
`Content-Type`, `Host`, the query parameter), and nothing may be written: every table of the accounts and
market apps keeps its row count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.test import Client

from tests.conftest import World
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db

DEEP = 5000


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # {job} is filled in
    who: str  # a World attribute
    body: dict[str, Any]  # a valid body
    fields: tuple[str, ...]  # fields to poison, each in turn
    text: tuple[str, ...] = ()  # which of them are free text ("1e25" is a fine name)


JOB = {
    "name": "train",
    "command": "python train.py",
    "gpus": 1,
    "max_hours": "1",
    "bids": [{"gpu_type": "H100", "limit": "3"}],
}
ENDPOINTS = {
    "job-submit": Endpoint(
        "post", "/api/v1/tenants/alpha/jobs", "amy", JOB, ("name", "gpus", "max_hours", "bids"), ("name",)
    ),
    "job-bid": Endpoint(
        "post", "/api/v1/tenants/alpha/jobs/{job}/bid", "amy", {"bids": JOB["bids"]}, ("bids",)
    ),
    "job-estimate": Endpoint(
        "post",
        "/api/v1/tenants/alpha/jobs/estimate",
        "amy",
        JOB,
        ("name", "gpus", "max_hours", "bids"),
        ("name",),
    ),
    "job-cancel": Endpoint("post", "/api/v1/tenants/alpha/jobs/{job}/cancel", "amy", {}, ()),
    "token-create": Endpoint(
        "post", "/api/v1/tenants/alpha/tokens", "amy", {"name": "ci"}, ("name",), ("name",)
    ),
    "topup": Endpoint(
        "post",
        "/api/v1/tenants/alpha/topups",
        "admin",
        {"amount": "5", "key": "k1"},
        ("amount", "key", "memo"),
        ("key", "memo"),
    ),
    "refund": Endpoint(
        "post", "/api/v1/tenants/alpha/refunds", "admin", {"amount": "1", "key": "r1"}, ("amount",)
    ),
    "gpu-type-create": Endpoint(
        "post",
        "/api/v1/gpu-types",
        "admin",
        {"name": "L4", "memory_gb": 24, "reserve_price": "1", "max_price": "9"},
        ("name", "memory_gb", "reserve_price"),
        ("name",),
    ),
    "gpu-type-change": Endpoint(
        "put",
        "/api/v1/gpu-types/H100",
        "admin",
        {"memory_gb": 80, "reserve_price": "2", "max_price": "20"},
        ("memory_gb", "max_price"),
    ),
    "spend-alert-create": Endpoint(
        "post",
        "/api/v1/tenants/alpha/spend-alerts",
        "alice",
        {"kind": "spend_day", "threshold": "5", "action": "cap", "cap": "9"},
        ("kind", "threshold", "action", "cap", "webhook_url"),  # email: `true` is a fine boolean
    ),
    "market-policy": Endpoint("patch", "/api/v1/policy", "admin", {"round_seconds": 60}, ("round_seconds",)),
    "tenant-policy": Endpoint(
        "patch", "/api/v1/tenants/alpha/policy", "admin", {"weight": 2}, ("weight", "guardrail", "guarantees")
    ),
}

# Values put in a field in turn, written as raw JSON text.
POISON = {
    "nan": "NaN",
    "infinity": "-Infinity",
    "float-overflow": "1e999",
    "int-5000-digits": "9" * 5000,
    "huge-exponent": '"1e25"',
    "giant-exponent": '"1e999999999"',
    "nul": '"a\\u0000b"',
    "lone-surrogate": '"\\ud800x"',
    "wrong-type-object": '{"a": 1}',
    "wrong-type-list": "[1, 2]",
    "wrong-type-bool": "true",
    "deep-nesting": "[" * DEEP + "]" * DEEP,
    "nesting-past-limit": "[" * 40 + "]" * 40,
}
# Whole bodies that are wrong as such.
BODIES: dict[str, tuple[bytes, str]] = {
    "list": (b"[1]", "application/json"),
    "null": (b"null", "application/json"),
    "string": (b'"x"', "application/json"),
    "truncated": (b'{"name": ', "application/json"),
    "not-utf8": (b'{"name": "\xff\xfe"}', "application/json"),
    "deep": (b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}", "application/json"),
    "form": (b"name=x&gpus=1", "application/x-www-form-urlencoded"),
    "text": (b"hello", "text/plain"),
    "multipart": (
        b"--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--b--\r\n",
        "multipart/form-data; boundary=b",
    ),
}


def _counts() -> dict[str, int]:
    return {
        model._meta.label: model._default_manager.count()
        for app in ("accounts", "inventory", "market", "nodeagent")
        for model in apps.get_app_config(app).get_models()
    }


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 100)
    return world


def _send(world: World, endpoint: Endpoint, raw: bytes, content_type: str, **extra: Any) -> Any:
    job = make_job(world.alpha, world.amy, limits={world.h100: 3})
    client = world.client(getattr(world, endpoint.who))
    before = _counts()
    path = endpoint.path.format(job=job.pk)
    resp = getattr(client, endpoint.method)(path, raw, content_type=content_type, **extra)
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.content[:300])
    assert resp["Content-Type"] == "application/json", resp.content[:300]
    assert _counts() == before
    return resp.json()


def _with(body: dict[str, Any], field: str, raw_value: str) -> bytes:
    marker = "__POISON__"
    text = json.dumps({**body, field: marker})
    return text.replace(json.dumps(marker), raw_value).encode()


@pytest.mark.parametrize(
    ("endpoint", "field"), [(name, f) for name, e in ENDPOINTS.items() for f in e.fields]
)
def test_a_poisoned_field_is_refused_and_named(market: World, endpoint: str, field: str) -> None:
    e = ENDPOINTS[endpoint]
    for poison, raw in POISON.items():
        if field in e.text and poison.endswith("exponent"):
            continue  # a number-like string is valid free text
        error = _send(market, e, _with(e.body, field, raw), "application/json")
        named = set(error.get("fields", {}))
        assert named and all(n == "body" or n.split(".")[0].split("[")[0] == field for n in named), (
            poison,
            error,
        )


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_bad_body_is_refused(market: World, endpoint: str) -> None:
    for body, (raw, content_type) in BODIES.items():
        error = _send(market, ENDPOINTS[endpoint], raw, content_type)
        assert set(error.get("fields", {})) & {"body", "Content-Type"}, (body, error)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_oversized_body_is_413(market: World, settings: Any, endpoint: str) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    e = ENDPOINTS[endpoint]
    raw = json.dumps({**e.body, "padding": "x" * 10_000}).encode()
    job = make_job(market.alpha, market.amy, limits={market.h100: 3})
    client = market.client(getattr(market, e.who))
    before = _counts()
    resp = getattr(client, e.method)(e.path.format(job=job.pk), raw, content_type="application/json")
    assert resp.status_code == 413 and resp.json()["fields"] == {"body": [resp.json()["fields"]["body"][0]]}
    assert _counts() == before


def test_a_lone_surrogate_with_an_idempotency_key_is_400(market: World) -> None:
    e = ENDPOINTS["job-submit"]
    error = _send(
        market,
        e,
        _with(e.body, "name", POISON["lone-surrogate"]),
        "application/json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert "name" in error["fields"]


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/gpu-types/H1%0000", "path"),
        ("/api/v1/tenants/alpha/jobs?gpu_type=H%00", "gpu_type"),
        ("/api/v1/tenants/alpha/jobs?submitter=%00", "submitter"),
        ("/api/v1/audit?tenant=alpha%00", "tenant"),
        ("/api/v1/tenants/alpha/ledger?until=9999-12-31", "until"),
        ("/api/v1/tenants/alpha/ledger?since=0001-01-01T00:00:00-23:59", "since"),
        ("/api/v1/tenants/alpha/ledger?since=9999-12-31T23:59:59%2B23:59", "since"),
        ("/api/v1/prices/history?until=0001-01-01", "until"),
        ("/api/v1/tenants/alpha/ledger?page=0", "page"),
        ("/api/v1/tenants/alpha/ledger?page=-1", "page"),
        ("/api/v1/tenants/alpha/ledger?page_size=0", "page_size"),
        ("/api/v1/tenants/alpha/jobs?gpu_type=", "gpu_type"),
        ("/api/v1/tenants/alpha/ledger?kind=", "kind"),
        ("/api/v1/rounds?state=", "state"),
        ("/api/v1/nodes?state=", "state"),
        ("/api/v1/nodes?state=%00", "state"),
    ],
)
def test_bad_paths_and_queries_are_400_naming_the_part(market: World, path: str, field: str) -> None:
    resp = market.client(market.admin, tenant=market.alpha).get(path)
    assert resp.status_code == 400, resp.content[:300]
    assert field in resp.json()["fields"], resp.json()


def test_django_level_refusals_are_json_on_the_api(market: World) -> None:
    client = Client()
    bad_host = client.get("/api/v1/me", HTTP_HOST="evil.example")
    assert bad_host.status_code == 400 and bad_host.json()["fields"].keys() == {"Host"}
    many = client.get("/api/v1/me?" + "&".join(f"a{i}=1" for i in range(1100)))
    assert many.status_code == 400 and many.json()["error"] == "bad_request"
    # Outside the API Django's own pages stay.
    assert "text/html" in client.get("/login/", HTTP_HOST="evil.example")["Content-Type"]
