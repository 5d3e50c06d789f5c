from __future__ import annotations

import pytest

from accounts.models import ApiToken, AuditEvent
from accounts.tokens import token_authenticate
from tests.conftest import World

pytestmark = pytest.mark.django_db


def test_create_shows_secret_once_and_stores_only_digest(world: World) -> None:
    client = world.client(world.amy)
    resp = client.post("/api/v1/tenants/alpha/tokens", {"name": "ci"}, format="json")
    assert resp.status_code == 201
    secret = resp.json()["token"]
    stored = ApiToken.objects.get(pk=resp.json()["id"])
    assert secret not in {stored.digest, stored.prefix} and secret.startswith(stored.prefix)
    listing = client.get("/api/v1/tenants/alpha/tokens").json()
    assert all("token" not in row for row in listing["results"])
    assert token_authenticate(raw=secret) == stored


def test_member_lists_only_own_tokens_manager_lists_all(world: World) -> None:
    world.client(world.amy)  # creates amy's token
    amy_rows = world.client(world.amy).get("/api/v1/tenants/alpha/tokens").json()["results"]
    assert {r["user"] for r in amy_rows} == {"amy"}
    alice_rows = world.client(world.alice).get("/api/v1/tenants/alpha/tokens").json()["results"]
    assert {r["user"] for r in alice_rows} == {"amy", "alice"}


def test_revoke_stops_the_token_and_is_audited(world: World) -> None:
    client = world.client(world.alice)
    created = client.post("/api/v1/tenants/alpha/tokens", {"name": "x"}, format="json").json()
    resp = client.delete(f"/api/v1/tenants/alpha/tokens/{created['id']}")
    assert resp.status_code == 204 and resp.content == b""
    assert ApiToken.objects.get(pk=created["id"]).revoked_at is not None
    assert (
        client.delete(f"/api/v1/tenants/alpha/tokens/{created['id']}").status_code == 204
    )  # repeat is harmless
    assert AuditEvent.objects.filter(action="token.revoke").count() == 1
    revoked = world.client()
    revoked.credentials(HTTP_AUTHORIZATION=f"Bearer {created['token']}")
    resp = revoked.get("/api/v1/me")
    assert resp.status_code == 401 and "revoked" in resp.json()["detail"]


def test_member_cannot_revoke_someone_elses_token(world: World) -> None:
    alice_token = ApiToken.objects.get(
        pk=world.client(world.alice).get("/api/v1/tenants/alpha/tokens").json()["results"][0]["id"]
    )
    resp = world.client(world.amy).delete(f"/api/v1/tenants/alpha/tokens/{alice_token.pk}")
    assert resp.status_code == 404
    alice_token.refresh_from_db()
    assert alice_token.revoked_at is None


def test_token_is_bound_to_its_tenant(world: World) -> None:
    # bob manages beta; a beta token cannot reach alpha, and alpha does not even appear to exist.
    assert world.client(world.bob).get("/api/v1/tenants/alpha/tokens").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/tenants/alpha/tokens"),
        ("post", "/api/v1/tenants/alpha/tokens"),
        ("delete", "/api/v1/tenants/alpha/tokens/1"),
    ],
)
def test_outsider_gets_404_and_anonymous_401(world: World, method: str, path: str) -> None:
    before = ApiToken.objects.count()
    outsider = world.client(world.bob)
    assert getattr(outsider, method)(path, {"name": "x"}, format="json").status_code == 404
    assert getattr(world.client(), method)(path, {"name": "x"}, format="json").status_code == 401
    assert ApiToken.objects.count() == before + 1  # only the outsider's own fixture token


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "x" * 101}, {"name": None}])
def test_bad_token_name_is_400_naming_field(world: World, body: dict[str, object]) -> None:
    client = world.client(world.alice)
    before = ApiToken.objects.count()
    resp = client.post("/api/v1/tenants/alpha/tokens", body, format="json")
    assert resp.status_code == 400
    assert "name" in resp.json()["fields"]
    assert ApiToken.objects.count() == before


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer gpm_not-a-real-token",
        "Bearer a b",
        "Bearer " + "x" * 5000,
        "Bearer gpm_\x00",
    ],
)
def test_malformed_tokens_get_401_json(world: World, header: str) -> None:
    client = world.client()
    client.credentials(HTTP_AUTHORIZATION=header)
    resp = client.get("/api/v1/me")
    assert resp.status_code == 401
    assert resp.json()["error"] in {"authentication_failed", "not_authenticated"}


def test_token_of_removed_member_stops_working(world: World) -> None:
    client = world.client(world.amy)
    world.amy.memberships.all().delete()
    assert client.get("/api/v1/me").status_code == 401


def test_removing_a_member_revokes_their_tokens_for_good(world: World) -> None:
    from accounts.models import Membership, Role

    client = world.client(world.amy)
    Membership.objects.get(user=world.amy, tenant=world.alpha).delete()
    assert ApiToken.objects.filter(user=world.amy, tenant=world.alpha, revoked_at__isnull=True).count() == 0
    Membership.objects.create(user=world.amy, tenant=world.alpha, role=Role.MEMBER)
    assert client.get("/api/v1/me").status_code == 401  # re-adding the user does not revive the token


def test_a_manager_neither_sees_nor_revokes_an_admins_token(world: World) -> None:
    from accounts.tokens import token_create

    admin_token = token_create(user=world.admin, tenant=world.alpha, name="ops").token
    alice = world.client(world.alice)
    rows = alice.get("/api/v1/tenants/alpha/tokens").json()["results"]
    assert admin_token.pk not in {r["id"] for r in rows}
    assert alice.delete(f"/api/v1/tenants/alpha/tokens/{admin_token.pk}").status_code == 404
    admin_token.refresh_from_db()
    assert admin_token.revoked_at is None
    rows = world.client(world.admin, tenant=world.alpha).get("/api/v1/tenants/alpha/tokens").json()["results"]
    assert admin_token.pk in {r["id"] for r in rows}


def test_live_tokens_per_user_are_capped(world: World, settings) -> None:
    settings.API_TOKENS_PER_USER = 3
    client = world.client(world.amy)  # the first live token
    codes = [client.post("/api/v1/tenants/alpha/tokens", {"name": f"t{i}"}, format="json") for i in range(3)]
    assert [r.status_code for r in codes] == [201, 201, 409]
    assert codes[-1].json()["error"] == "too_many_tokens"
    assert ApiToken.objects.filter(user=world.amy, revoked_at__isnull=True).count() == 3
    client.delete(f"/api/v1/tenants/alpha/tokens/{codes[0].json()['id']}")
    assert client.post("/api/v1/tenants/alpha/tokens", {"name": "again"}, format="json").status_code == 201
