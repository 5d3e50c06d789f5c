from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from inventory.models import GpuType
from tests.conftest import World

pytestmark = pytest.mark.django_db


def test_anyone_signed_in_lists_types_anonymous_gets_401(world: World) -> None:
    rows = world.client(world.amy).get("/api/v1/gpu-types").json()["results"]
    assert [(r["name"], r["reserve_price"], r["reserve_price_credits"]) for r in rows] == [
        ("A100", 1_200_000, "1.2"),
        ("H100", 2_000_000, "2"),
    ]
    assert world.client().get("/api/v1/gpu-types").status_code == 401


def test_admin_creates_and_changes_a_type_audited(world: World) -> None:
    admin = world.client(world.admin)
    body = {"name": "V100", "memory_gb": 32, "reserve_price": "0.5", "max_price": "5"}
    resp = admin.post("/api/v1/gpu-types", body, format="json")
    assert resp.status_code == 201 and resp.json()["reserve_price"] == 500_000
    resp = admin.put("/api/v1/gpu-types/V100", {**body, "reserve_price": "0"}, format="json")
    assert resp.status_code == 200 and resp.json()["reserve_price"] == 0
    assert AuditEvent.objects.filter(action__startswith="gpu_type.").count() == 2


def test_members_cannot_change_types(world: World) -> None:
    body = {"name": "V100", "memory_gb": 32, "reserve_price": "0.5", "max_price": "5"}
    assert world.client(world.alice).post("/api/v1/gpu-types", body, format="json").status_code == 403
    assert world.client(world.alice).put("/api/v1/gpu-types/H100", body, format="json").status_code == 403
    assert not GpuType.objects.filter(name="V100").exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"reserve_price": "-1"}, "reserve_price"),
        ({"reserve_price": "abc"}, "reserve_price"),
        ({"reserve_price": "0.0000001"}, "reserve_price"),
        ({"max_price": "1e30"}, "max_price"),
        ({"max_price": "0.1"}, "max_price"),  # below the reserve
        ({"memory_gb": 0}, "memory_gb"),
        ({"name": "bad name!"}, "name"),
        ({"name": "H100"}, "name"),  # exists
    ],
)
def test_bad_type_is_400_naming_field(world: World, change: dict[str, object], field: str) -> None:
    body = {"name": "V100", "memory_gb": 32, "reserve_price": "0.5", "max_price": "5", **change}
    before = GpuType.objects.count()
    resp = world.client(world.admin).post("/api/v1/gpu-types", body, format="json")
    assert resp.status_code == 400, resp.json()
    assert field in resp.json()["fields"]
    assert GpuType.objects.count() == before


def test_unknown_type_is_404(world: World) -> None:
    assert world.client(world.amy).get("/api/v1/gpu-types/nope").status_code == 404
