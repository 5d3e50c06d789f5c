"""The shadow rounds API (market/api/shadow.py): platform admins only; start, stop, totals, rounds."""

from __future__ import annotations

import pytest
from django.utils import timezone

from market.models import Round
from market.services.rounds import round_advance, slot_of
from tests.conftest import World
from tests.market.shadow_helpers import contended, propose

pytestmark = pytest.mark.django_db


def test_only_platform_admins_see_or_change_a_shadow(world: World) -> None:
    version = propose(world, weights={"alpha": 10})
    base = f"/api/v1/policy/versions/{version.number}/shadow"
    owner = world.client(world.alice)  # a tenant's manager, not a platform admin
    for method, path in (
        ("get", base),
        ("get", f"{base}/rounds"),
        ("post", f"{base}/start"),
        ("post", f"{base}/stop"),
    ):
        response = getattr(owner, method)(path)
        assert response.status_code == 403, (method, path, response.json())
        assert response.json()["error"] == "permission_denied"
    assert world.client().get(base).status_code in (401, 403)  # anonymous
    assert world.client(world.admin).get("/api/v1/policy/versions/999999/shadow").status_code == 404


def test_admin_starts_a_shadow_reads_its_rounds_and_stops_it(world: World) -> None:
    contended(world)
    version = propose(world, weights={"alpha": 10})
    admin = world.client(world.admin)
    base = f"/api/v1/policy/versions/{version.number}/shadow"

    started = admin.post(f"{base}/start")
    assert started.status_code == 201, started.json()
    assert started.json()["started_by"] == "root" and started.json()["stopped_at"] is None
    assert started.json()["version"] == version.number
    again = admin.post(f"{base}/start")
    assert again.status_code == 400 and again.json()["fields"] == {
        "version": ["this version already runs in shadow"]
    }

    rnd = Round.objects.create(slot=slot_of(timezone.now(), 300), period_s=300)
    round_advance(round_id=rnd.pk)

    summary = admin.get(base).json()
    assert summary["running"] is True and summary["totals"]["rounds"] == 1
    assert (
        summary["totals"]["gained"] > 0
        and summary["tenants"]["alpha"]["gained"] == summary["totals"]["gained"]
    )
    assert set(summary["compliance"]) == {"live", "proposed"}
    assert summary["prices"]["H100"]["rounds"] == 1
    rounds = admin.get(f"{base}/rounds").json()
    assert rounds["count"] == 1
    row = rounds["results"][0]
    assert row["round"] == rnd.pk and row["gained"] == summary["totals"]["gained"]
    assert row["tenants"]["alpha"]["gpus_proposed"] > row["tenants"]["alpha"]["gpus_live"]

    stopped = admin.post(f"{base}/stop")
    assert stopped.status_code == 200 and stopped.json()["stopped_by"] == "root"
    assert admin.get(base).json()["running"] is False
    assert admin.post(f"{base}/stop").status_code == 400


def test_a_version_that_is_not_proposed_cannot_run_in_shadow(world: World) -> None:
    version = propose(world)
    version.status = "applied"
    version.save(update_fields=["status"])
    response = world.client(world.admin).post(f"/api/v1/policy/versions/{version.number}/shadow/start")
    assert response.status_code == 400
    assert "only a proposed version" in response.json()["detail"]
