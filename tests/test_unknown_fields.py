"""Unknown fields are refused at every write endpoint (issue 37 §5): a client that sends `max_hour` for
`max_hours` hears about it, with a 400 naming the field, and nothing is written. The test walks every POST,
PUT and PATCH of the API's own schema, so a new endpoint is covered the day it is added; the node agents'
protocol is the one exception (config/api.BodySerializer says why)."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from accounts.models import AuditEvent
from market.models import Job, JournalEntry, PolicyVersion, SpendAlertRule
from market.selectors.policy_versions import current_version
from market.services.canary import canary_start
from market.services.policy import policy_update
from market.services.policy_proposals import policy_version_propose
from market.services.spend_alerts import spend_alert_create
from tests.conftest import World

pytestmark = pytest.mark.django_db

WRITES = ("post", "put", "patch")
EXCEPTIONS = ("/api/v1/agent/",)  # the agents' protocol: forward compatible on purpose


def write_operations() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(
        (method, path)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in WRITES and not path.startswith(EXCEPTIONS)
    )


def _counts() -> tuple[int, ...]:
    return (
        Job.objects.count(),
        JournalEntry.objects.count(),
        PolicyVersion.objects.count(),
        SpendAlertRule.objects.count(),
        AuditEvent.objects.count(),
    )


@pytest.fixture
def objects(world: World) -> dict[str, Any]:
    """One of everything a write's path names, so each request reaches its body."""
    node = world.nodes(world.h100, 1, size=8)[0]
    world.fund(world.alpha, 100)
    job = Job.objects.create(
        tenant=world.alpha,
        submitter=world.alice,
        name="j",
        command="run",
        limits=[{"gpu_type": "H100", "limit": 1}],
        gpus=1,
        max_seconds=3600,
        grace_seconds=30,
    )
    rule = spend_alert_create(actor=world.alice, tenant=world.alpha, kind="spend_day", threshold=10)
    policy_update(actor=world.admin, min_runtime_s=100)
    draft = policy_version_propose(actor=world.admin, snapshot={"tenants": {"beta": {"weight": 3}}})
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"])
    version = current_version()
    assert version is not None
    return {
        "slug": "alpha",
        "job_id": job.pk,
        "rule_id": rule.rule.pk,
        "name": node.name,
        "number": draft.number,
        "canary_id": canary.pk,
    }


def test_the_walk_covers_the_writes_people_use() -> None:
    found = {path for _, path in write_operations()}
    for path in ("/api/v1/tenants/{slug}/jobs", "/api/v1/tenants/{slug}/spend-alerts", "/api/v1/policy"):
        assert path in found


@pytest.mark.parametrize(("method", "path"), write_operations())
def test_every_write_refuses_an_unknown_field_by_name(
    world: World, objects: dict[str, Any], method: str, path: str, settings: Any
) -> None:
    # Single sign-on answers 404 while unconfigured; configured, its body is checked before any provider call.
    settings.OIDC_ISSUER = "https://issuer.invalid"
    url = path.format(**objects)
    if path.startswith("/api/v1/gpu-types/"):
        url = path.format(name="H100")
    client = world.client(world.admin, tenant=world.alpha)
    before = _counts()
    got = getattr(client, method)(url, {"max_hour": 1}, format="json")
    assert got.status_code == 400, (url, got.status_code, got.json())
    body = got.json()
    assert body["error"] == "invalid" and "max_hour" in body["fields"], body
    assert "max_hour" in body["detail"] or "max_hour" in str(body["fields"])
    assert _counts() == before


def test_a_misspelt_job_field_is_named(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    job = {"name": "t", "command": "run", "gpus": 1, "bids": [{"gpu_type": "H100", "limit": "5"}]}
    got = world.client(world.amy).post("/api/v1/tenants/alpha/jobs", {**job, "max_hour": 1}, format="json")
    assert got.status_code == 400
    assert got.json()["fields"]["max_hour"] == ["is not a field of this request"]
    nested = {**job, "max_hours": 1, "bids": [{"gpu_type": "H100", "limit": "5", "limt": "6"}]}
    got = world.client(world.amy).post("/api/v1/tenants/alpha/jobs", nested, format="json")
    assert got.status_code == 400 and "bids[0].limt" in got.json()["fields"], got.json()
    assert not Job.objects.exists()
