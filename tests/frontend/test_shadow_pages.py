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


def test_the_shadow_page_says_what_differed_or_that_nothing_did(world: World) -> None:
    """Issue 37 §5: every difference named per tenant and round (a repricing too), and a version whose rounds
    changed nothing says so and why, instead of listing tenants whose numbers are all equal."""
    from datetime import timedelta

    from django.utils import timezone

    from frontend.shadow_text import nothing_differed, round_changes
    from market.selectors.policy_snapshot import policy_snapshot
    from market.services.rounds import round_tick
    from market.services.shadow import shadow_start
    from tests.market.round_helpers import make_job

    repriced = {
        "alpha": {"gained": 0, "lost": 0, "repriced": 2, "preempted_live": 0, "preempted_proposed": 0}
    }
    assert round_changes(repriced) == ["alpha: 2 bid(s) won on both sides at another price, tier or GPU type"]
    assert nothing_differed({"rounds": 0}, in_force=True) == ""

    for tenant, user in ((world.alpha, world.alice), (world.beta, world.bob)):
        world.fund(tenant, 2000)
        for i in range(16):
            make_job(tenant, user, gpus=1, limits={world.h100: 3}, name=f"{tenant.slug}-{i}", hours=4)
    moves = propose(world, weights={"alpha": 10})
    same = propose(world, min_runtime_s=policy_snapshot()["market"]["min_runtime_s"])  # the policy in force
    for version in (moves, same):
        shadow_start(actor=world.admin, version=version)
    start = timezone.now()
    for r in range(2):
        world.nodes(world.h100, 1, size=8)
        assert round_tick(now=start + timedelta(seconds=300 * r)) is not None
    admin = login(Client(), world.admin)
    changed = admin.get(f"/console/shadow/{moves.number}/").content.decode()
    assert "alpha: " in changed and "won only under the proposal" in changed
    assert "Nothing differed" not in changed
    idle = admin.get(f"/console/shadow/{same.number}/").content.decode()
    assert "Nothing differed in 2 round(s)" in idle and "is the one in force now" in idle
