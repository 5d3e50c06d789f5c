"""POST /api/v1/auth/oidc/token: an ID token for the command line's client traded for an API token scoped like
any other; every refusal is a 400 naming the field (or 403/404/503), never a 500."""

from __future__ import annotations

import secrets
import socket
import time

import pytest
from rest_framework.test import APIClient

from accounts.models import ApiToken, GroupMapping, OidcIdentity, Role, User
from tests.oidc import CLI_CLIENT, TestKeyIssuer

pytestmark = pytest.mark.django_db
URL = "/api/v1/auth/oidc/token"


@pytest.fixture
def mapped(world, sso_settings):
    GroupMapping.objects.create(group="ml", tenant=world.alpha, role=Role.MEMBER)
    GroupMapping.objects.create(group="bio", tenant=world.beta, role=Role.MANAGER)
    return world


def _token(issuer: TestKeyIssuer, sub: str = "dev-1", **over) -> str:
    now = int(time.time())
    claims = {"iss": issuer.issuer, "sub": sub, "aud": CLI_CLIENT, "iat": now, "exp": now + 300}
    claims |= {"preferred_username": "dev", "groups": ["ml"], "jti": secrets.token_hex(8)}
    return issuer.sign(claims | over)


def _post(body):
    return APIClient().post(URL, body, format="json")


def test_exchange_gives_a_working_token_in_the_mapped_team(mapped, key_issuer):
    response = _post({"id_token": _token(key_issuer), "name": "laptop"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["tenant"], body["name"], body["username"]) == ("alpha", "laptop", "dev")
    me = APIClient(HTTP_AUTHORIZATION=f"Bearer {body['token']}").get("/api/v1/me")
    assert me.status_code == 200 and me.json()["token_tenant"] == "alpha"
    assert OidcIdentity.objects.filter(issuer=key_issuer.issuer, subject="dev-1").exists()


def test_several_teams_need_one_named(mapped, key_issuer):
    response = _post({"id_token": _token(key_issuer, groups=["ml", "bio"])})
    assert response.status_code == 400
    assert response.json()["fields"]["tenant"] == ["name one of your teams (alpha, beta)"]
    response = _post({"id_token": _token(key_issuer, sub="dev-2", groups=["ml", "bio"]), "tenant": "beta"})
    assert response.status_code == 201 and response.json()["tenant"] == "beta"


def test_a_team_not_yours_is_refused(mapped, key_issuer):
    response = _post({"id_token": _token(key_issuer), "tenant": "gamma"})
    assert response.status_code == 400
    assert response.json()["fields"]["tenant"] == ["you are not a member of 'gamma'"]
    assert not ApiToken.objects.filter(name="gpumarket login --device").exists()


def test_no_mapped_group_means_no_team(mapped, key_issuer):
    response = _post({"id_token": _token(key_issuer, groups=["other"])})
    assert response.status_code == 400
    assert "ask an admin to map one of your groups" in response.json()["detail"]


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"aud": "gpumarket-web-of-someone-else"}, "another client (aud)"),
        ({"exp": 1_000_000}, "expired (exp)"),
        ({"iss": "https://idp.evil.example"}, "another provider (iss)"),
    ],
)
def test_bad_tokens_are_400_naming_id_token(mapped, key_issuer, over, reason):
    response = _post({"id_token": _token(key_issuer, **over)})
    assert response.status_code == 400
    (message,) = response.json()["fields"]["id_token"]
    assert message.startswith("refused: ") and message.endswith(reason)


def test_a_token_is_exchanged_once(mapped, key_issuer):
    raw = _token(key_issuer)
    assert _post({"id_token": raw}).status_code == 201
    again = _post({"id_token": raw})
    assert again.status_code == 400 and "used before (replay)" in again.json()["detail"]


def test_bad_bodies_name_the_field(mapped, key_issuer):
    assert _post({}).json()["fields"] == {"id_token": ["This field is required."]}
    assert _post({"id_token": 5}).status_code == 400
    unknown = _post({"id_token": _token(key_issuer), "tenent": "alpha"})
    assert unknown.status_code == 400 and "tenent" in unknown.json()["fields"]


def test_a_disabled_user_is_refused(mapped, key_issuer):
    assert _post({"id_token": _token(key_issuer)}).status_code == 201
    User.objects.filter(oidc_identities__subject="dev-1").update(is_active=False)
    assert _post({"id_token": _token(key_issuer)}).status_code == 403


def test_off_without_an_issuer(world, settings):
    settings.OIDC_ISSUER = ""
    assert _post({"id_token": "x"}).status_code == 404


def test_unreachable_provider_is_503(world, sso_settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sso_settings.OIDC_ISSUER = f"http://127.0.0.1:{port}"
    response = _post({"id_token": "a.b.c"})
    assert response.status_code == 503 and response.json()["error"] == "provider_unavailable"


def test_leaving_the_group_ends_the_token_at_the_next_sign_in(mapped, key_issuer):
    issued = _post({"id_token": _token(key_issuer)}).json()
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued['token']}")
    assert api.get("/api/v1/me").status_code == 200
    # The next sign-in (here the next exchange) no longer names the group: no team, and the token stops.
    assert _post({"id_token": _token(key_issuer, groups=[])}).status_code == 400
    assert api.get("/api/v1/me").status_code == 401
