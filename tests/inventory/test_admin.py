"""The inventory's Django admin pages (issue 26): under /admin/inventory/, GPU types saved through their service,
nodes and GPUs read-only; guarantees under /admin/market/."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import AuditEvent
from inventory.models import GpuType, Node
from market.models import Guarantee

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(world):
    world.admin.is_superuser = True
    world.admin.save(update_fields=["is_superuser"])
    client = Client()
    client.force_login(world.admin)
    return client


def test_the_moved_models_pages_are_under_their_new_apps(world, site):
    node = world.nodes(world.h100, 1, size=2)[0]
    Guarantee.objects.create(tenant=world.alpha, gpu_type=world.h100, gpus=1)
    for path in [
        "/admin/inventory/gputype/",
        f"/admin/inventory/gputype/{world.h100.pk}/change/",
        "/admin/inventory/node/",
        f"/admin/inventory/node/{node.pk}/change/",
        "/admin/inventory/gpu/",
        "/admin/market/guarantee/",
    ]:
        assert site.get(path).status_code == 200, path
    for path in [
        "/admin/market/gputype/",
        "/admin/nodeagent/node/",
        "/admin/nodeagent/gpu/",
        "/admin/accounts/guarantee/",
    ]:
        assert site.get(path).status_code == 404, path


def test_nodes_cannot_be_added_changed_or_deleted_in_the_admin(world, site):
    """Registration, heartbeats, drain and retire (nodeagent's services) are the only writers."""
    node = world.nodes(world.h100, 1, size=2)[0]
    assert site.get("/admin/inventory/node/add/").status_code == 403
    site.post(f"/admin/inventory/node/{node.pk}/change/", {"name": "renamed", "state": "retired"})
    assert site.post(f"/admin/inventory/node/{node.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Node.objects.filter(pk=node.pk, name=node.name, state=Node.State.UP).exists()


def test_a_gpu_type_added_in_the_admin_is_checked_and_audited_by_its_service(world, site):
    fields = {"name": "L40S", "memory_gb": 48, "reserve_price": 500_000, "max_price": 5_000_000}
    assert site.post("/admin/inventory/gputype/add/", fields).status_code == 302
    assert GpuType.objects.filter(name="L40S", max_price=5_000_000).exists()
    assert AuditEvent.objects.filter(
        action="gpu_type.create", actor=world.admin, detail__name="L40S"
    ).exists()
