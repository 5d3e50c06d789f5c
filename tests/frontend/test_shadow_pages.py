"""The console's shadow pages (frontend/views/console_shadow.py): admins only; start and stop through the form,
a refused start is a message, never an error page."""

from __future__ import annotations

import pytest
from django.test import Client

from market.models import ShadowRun
from market.services.shadow import SHADOW_MAX
from tests.conftest import World
from tests.frontend.conftest import login
from tests.market.shadow_helpers import propose

pytestmark = pytest.mark.django_db


def test_shadow_pages_are_for_platform_admins_only(world: World) -> None:
    version = propose(world)
    pages = ["/console/shadow/", f"/console/shadow/{version.number}/"]
    for who in (world.alice, world.amy):
        client = login(Client(), who)
        for url in pages:
            assert client.get(url).status_code == 403, url
        assert client.post(f"/console/shadow/{version.number}/start/").status_code == 403
    assert not ShadowRun.objects.exists()
    admin = login(Client(), world.admin)
    for url in pages:
        assert admin.get(url).status_code == 200, url
    assert admin.get("/console/shadow/999999/").status_code == 404
    assert admin.post(f"/console/shadow/{version.number}/launch/").status_code == 404
    assert admin.get(f"/console/shadow/{version.number}/start/").status_code == 405  # a change is a POST


def test_admin_starts_and_stops_a_shadow_and_a_refusal_is_a_message(world: World) -> None:
    versions = [propose(world, min_runtime_s=60 + i) for i in range(SHADOW_MAX + 1)]
    admin = login(Client(), world.admin)
    for version in versions[:SHADOW_MAX]:
        page = admin.post(f"/console/shadow/{version.number}/start/", follow=True)
        assert "Shadow started" in page.content.decode()
    refused = admin.post(f"/console/shadow/{versions[-1].number}/start/", follow=True)
    assert refused.status_code == 200
    assert f"Not started: at most {SHADOW_MAX} versions run in shadow at once" in refused.content.decode()
    stopped = admin.post(f"/console/shadow/{versions[0].number}/stop/", follow=True)
    assert "Shadow stopped" in stopped.content.decode()
    assert ShadowRun.objects.filter(stopped_at__isnull=True).count() == SHADOW_MAX - 1
