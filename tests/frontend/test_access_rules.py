"""The owner and membership rules live in accounts/access.py (is_member, owner_or_manager) and the token rule in
accounts.tokens.tokens_visible; the API, the job service and the portal ask them (issue 26 §4)."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.access import is_member, owner_or_manager
from accounts.tokens import token_create
from tests.conftest import World
from tests.frontend.conftest import login

pytestmark = pytest.mark.django_db


def test_the_membership_rule(world: World) -> None:
    assert is_member(world.alice, world.alpha) and is_member(world.amy, world.alpha)
    assert not is_member(world.bob, world.alpha)
    assert is_member(world.admin, world.alpha)  # a platform admin acts in every tenant


def test_the_owner_rule(world: World) -> None:
    amy = world.amy.pk
    assert owner_or_manager(world.amy, owner_id=amy, tenant=world.alpha)  # the owner
    assert owner_or_manager(world.alice, owner_id=amy, tenant=world.alpha)  # the tenant's manager
    assert owner_or_manager(world.admin, owner_id=amy, tenant=world.alpha)  # a platform admin
    assert not owner_or_manager(world.bea, owner_id=amy, tenant=world.alpha)
    assert not owner_or_manager(world.amy, owner_id=world.alice.pk, tenant=world.alpha)  # a member, not owner
    # The portal passes what its seat already knows, and the answer is the same.
    assert not owner_or_manager(world.amy, owner_id=world.alice.pk, tenant=world.alpha, manages=False)
    assert owner_or_manager(world.alice, owner_id=amy, tenant=world.alpha, manages=True)


def test_the_portal_lists_the_tokens_the_api_lists(world: World) -> None:
    """The portal's token page had its own rule (an owner saw every token of the team, a platform admin's
    too); it now asks the API's, so an owner neither sees nor revokes an admin's token bound to the team."""
    admin_token = token_create(user=world.admin, tenant=world.alpha, name="ops-token").token
    token_create(user=world.amy, tenant=world.alpha, name="amy-laptop")
    token_create(user=world.alice, tenant=world.alpha, name="alice-ci")
    for user in (world.alice, world.amy, world.admin):
        api = world.client(user, tenant=world.alpha).get("/api/v1/tenants/alpha/tokens").json()["results"]
        page = login(Client(), user).get("/t/alpha/tokens/").content.decode()
        for name in ("ops-token", "amy-laptop", "alice-ci"):
            assert (name in page) == (name in {r["name"] for r in api}), (user.username, name)
    owner = login(Client(), world.alice)
    assert owner.post(f"/t/alpha/tokens/{admin_token.pk}/revoke/").status_code == 404
    admin_token.refresh_from_db()
    assert admin_token.revoked_at is None
