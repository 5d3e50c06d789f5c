"""The API against its own schema (issue 19 §5): schemathesis generates requests for every operation in
/api/schema/, as a tenant member and as a platform admin, and runs every check on each response: no 5xx,
status codes, content types, headers and bodies as documented, invalid input refused. A client generated
from the schema must work."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from config.inputs import parse_instant
from config.money import MAX_AMOUNT
from config.wsgi import application
from inventory.models import GpuType
from tests.conftest import World

# slow: minutes of generated or hostile input; `make check` leaves it out, `make test` runs it.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# Examples per operation and role: enough to try every parameter's edges, few enough to stay quick.
EXAMPLES = 6
# Every check runs, positive_data_acceptance and negative_data_rejection included: the schema states every
# rule of the request's form (patterns for decimals, instants, state lists and text, minItems, page bounds,
# additionalProperties: false where unknown names are refused) and the API takes exactly that
# (docs/reliability.md §The schema).
EXCLUDED: list[str] = []

# What no schema can state is data (which names exist, a type's maximum price, the largest gang) and rules
# across fields or locations (docs/reliability.md §The schema). A name that does not exist is a 400 naming it
# (a typo must not look like an empty list), so a request generated as valid names existing ones and keeps
# those rules (_fit_to_the_data); nothing else of it changes. Requests generated as invalid go out as they are.
NAMES = {"gpu_type": "H100", "tenant": "alpha", "actor": "amy", "submitter": "amy"}
TYPES = ["H100", "A100"]  # each with one node of GANG GPUs
GANG = 8


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """As Django's test client does: a request must not close the test's connection (and its transaction)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


# Loaded at collection (pytest-django has set Django up by then); generating the schema needs no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


def _headers(world: World, username: str) -> dict[str, str]:
    from accounts.tokens import token_create

    world.nodes(world.h100, 1, size=GANG)
    world.nodes(world.a100, 1, size=GANG)
    # A bid's limit may be at most its type's maximum price, which is data too: let that be the most an
    # amount may be, so that every limit the schema admits is one the types take.
    GpuType.objects.update(max_price=MAX_AMOUNT)
    world.fund(world.alpha, 1000)
    secret = token_create(user=getattr(world, username), tenant=world.alpha, name="schemathesis").secret
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def member(world: World) -> dict[str, str]:
    return _headers(world, "amy")


@pytest.fixture
def admin(world: World) -> dict[str, str]:
    from market.services.policy_proposals import policy_version_propose

    headers = _headers(world, "admin")
    # Versions 1 (the policy in force) and 2 (a proposal), for the versions' and canaries' requests to name.
    policy_version_propose(actor=world.admin, snapshot={"tenants": {"alpha": {"weight": 2}}})
    return headers


def _fit_to_the_data(case: Any) -> None:
    """A request generated as valid, with names that exist and the rules across fields kept (see NAMES)."""
    query = case.query or {}
    for name, existing in NAMES.items():
        if name in query:
            query[name] = existing
    since, until = query.get("since"), query.get("until")
    if since and until and parse_instant(until) <= parse_instant(since):  # `until` must be after `since`
        del query["until"]
    # Most bodies take names they do not know (and ignore them), but no string anywhere may hold a NUL
    # (config/parsers): the schema says so of every string it documents, and OpenAPI 3.0 cannot say it of
    # the names and values it does not (no `propertyNames`).
    if isinstance(case.body, dict):  # (assigning a body where there is none would make the case one)
        case.body = _without_nul(case.body)
    body = case.body if isinstance(case.body, dict) else {}
    if isinstance(body.get("bids"), list):  # a submit's or an amend's: distinct types, a gang that fits
        body["bids"] = [dict(bid, gpu_type=name) for bid, name in zip(body["bids"], TYPES, strict=False)]
    if isinstance(body.get("gpus"), int):
        body["gpus"] = min(body["gpus"], GANG)
    if isinstance(body.get("gpu_type"), str):  # a bootstrap token's type
        body["gpu_type"] = NAMES["gpu_type"]
    if isinstance(body.get("guarantees"), dict):  # a tenant's guarantees, by type, within the cluster
        guarantees = body["guarantees"].values()
        body["guarantees"] = {name: min(gpus, GANG) for name, gpus in zip(TYPES, guarantees, strict=False)}
    if case.method == "POST" and case.path == "/api/v1/gpu-types":
        # A new type's name must be new (the same example may come twice), its reserve at most its maximum.
        body["name"] = f"{body['name'][:50]}-{uuid.uuid4().hex[:8]}"
        if Decimal(body["reserve_price"]) > Decimal(body["max_price"]):
            body["reserve_price"], body["max_price"] = body["max_price"], body["reserve_price"]
    _fit_policy_versions(case, body)
    if case.method == "POST" and case.path.endswith("/spend-alerts"):
        _fit_spend_alert(body)
    if case.path.endswith(("/topups", "/refunds")):
        # The key comes in the body or the header, the same one if both.
        header = (case.headers or {}).get("Idempotency-Key")
        if header:
            body["key"] = header
        else:
            body.setdefault("key", "k")


def _fit_policy_versions(case: Any, body: dict[str, Any]) -> None:
    """A proposal names existing tenants and types, with a reserve at most the maximum and guarantees within
    the cluster; a canary names version 2 and a tenant of it, or the market part."""
    snapshot = body.get("snapshot")
    if isinstance(snapshot, dict):
        if isinstance(snapshot.get("tenants"), dict):
            parts = [p for p in snapshot["tenants"].values() if isinstance(p, dict)][:1]
            snapshot["tenants"] = dict(zip([NAMES["tenant"]], parts, strict=False))
            for part in parts:
                if isinstance(part.get("guarantees"), dict):
                    gpus = part["guarantees"].values()
                    part["guarantees"] = {t: min(n, GANG) for t, n in zip(TYPES, gpus, strict=False)}
        if isinstance(snapshot.get("gpu_types"), dict):
            prices = [p for p in snapshot["gpu_types"].values() if isinstance(p, dict)]
            snapshot["gpu_types"] = {t: dict(p) for t, p in zip(TYPES, prices, strict=False)}
            for p in snapshot["gpu_types"].values():
                # A partial bound meets the type's own other bound: give both, in order.
                low, high = sorted([p.get("reserve_price", 0), p.get("max_price", MAX_AMOUNT)])
                p["reserve_price"], p["max_price"] = low, high
    if case.method == "POST" and case.path == "/api/v1/policy/canaries":
        body["version"] = 2
        body["tenants"] = [NAMES["tenant"]] if body.get("tenants") else []
        if not body["tenants"]:
            body["market"] = True


def _fit_spend_alert(body: dict[str, Any]) -> None:
    """A new spend alert's rules across fields (docs/alerts.md): a runway threshold is whole hours, a cap is
    for a spend kind and at least the threshold, and only with the cap action; a webhook's address is public
    (the schema's pattern cannot say that, nor that a port is valid)."""
    if body.get("kind") == "runway_hours":
        body["threshold"] = "24"
    if body.get("action") == "cap":
        body["kind"] = "spend_day" if body.get("kind") == "runway_hours" else body.get("kind")
        body["threshold"] = "1"
        body["cap"] = "2"
    else:
        body.pop("cap", None)
    if body.get("webhook_url"):
        body["webhook_url"] = "https://example.org/hook"


def _without_nul(value: Any) -> Any:
    def nul(item: Any) -> bool:
        return isinstance(item, str) and "\x00" in item

    if isinstance(value, dict):
        return {k: _without_nul(v) for k, v in value.items() if not nul(k) and not nul(v)}
    if isinstance(value, list):
        return [_without_nul(v) for v in value if not nul(v)]
    return value


def _call(case: Any, headers: dict[str, str]) -> None:
    if "slug" in (case.path_parameters or {}):
        case.path_parameters["slug"] = "alpha"  # the caller's own tenant: reach past the 404
    if case.meta.generation.mode.is_positive:
        _fit_to_the_data(case)
    case.call_and_validate(
        headers=headers, excluded_checks=[getattr(schemathesis.checks, name) for name in EXCLUDED]
    )


_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


@schema.parametrize()
@_SETTINGS
def test_every_operation_conforms_for_a_member(case: Any, member: dict[str, str]) -> None:
    _call(case, member)


@schema.parametrize()
@_SETTINGS
def test_every_operation_conforms_for_an_admin(case: Any, admin: dict[str, str]) -> None:
    _call(case, admin)
