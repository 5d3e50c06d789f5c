from __future__ import annotations

import pytest

from tests.conftest import World

pytestmark = pytest.mark.django_db


def test_me_lists_tenants_and_roles(world: World) -> None:
    resp = world.client(world.alice).get("/api/v1/me")
    assert resp.status_code == 200
    assert resp.json()["username"] == "alice"
    assert resp.json()["tenants"] == [{"slug": "alpha", "name": "Alpha", "role": "manager"}]
    assert resp.json()["token_tenant"] == "alpha"


def test_me_needs_authentication(world: World) -> None:
    resp = world.client().get("/api/v1/me")
    assert resp.status_code == 401
    assert resp.json()["error"] == "not_authenticated"


def test_passwords_are_hashed_with_argon2() -> None:
    from django.conf import settings
    from django.contrib.auth.hashers import make_password

    assert settings.PASSWORD_HASHERS[0].endswith("Argon2PasswordHasher")
    assert make_password("x").startswith("argon2")
