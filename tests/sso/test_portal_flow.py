"""The portal's side of the authorization code flow, request by request: what the redirect to the provider
carries, and the callback's refusals (the whole flow runs in tests/browser/test_sso.py)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from tests.oidc import WEB_CLIENT

pytestmark = pytest.mark.django_db


def _start(client: Client) -> dict[str, str]:
    response = client.get("/login/sso/?next=/t/alpha/")
    assert response.status_code == 302
    return {k: v[0] for k, v in parse_qs(urlsplit(response["Location"]).query).items()}


def test_the_redirect_carries_pkce_state_and_nonce(sso_settings, key_issuer):
    params = _start(Client())
    assert params["client_id"] == WEB_CLIENT and params["response_type"] == "code"
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert len(params["state"]) >= 32 and len(params["nonce"]) >= 32
    assert params["redirect_uri"] == "http://testserver/login/sso/callback/"
    assert params["scope"] == "openid email profile groups"
    assert _start(Client())["state"] != params["state"]


def test_an_unknown_state_is_refused(sso_settings, key_issuer):
    response = Client().get("/login/sso/callback/?state=made-up&code=x")
    assert response.status_code == 400
    assert "finished or has expired" in response.content.decode()


def test_the_providers_error_is_shown_and_the_state_spent(sso_settings, key_issuer):
    client = Client()
    state = _start(client)["state"]
    response = client.get(f"/login/sso/callback/?state={state}&error=access_denied")
    assert response.status_code == 400 and "did not sign you in: access_denied" in response.content.decode()
    again = client.get(f"/login/sso/callback/?state={state}&code=x")
    assert "finished or has expired" in again.content.decode()


def test_an_answer_from_another_issuer_is_refused(sso_settings, key_issuer):
    client = Client()
    state = _start(client)["state"]
    response = client.get(f"/login/sso/callback/?state={state}&code=x&iss=https://evil.example")
    assert response.status_code == 400 and "another provider" in response.content.decode()


def test_a_code_the_provider_refuses_is_a_clear_failure(sso_settings, key_issuer):
    # The test-key issuer has no token endpoint: the exchange fails, and the page says so (no 500).
    client = Client()
    state = _start(client)["state"]
    response = client.get(f"/login/sso/callback/?state={state}&code=x")
    assert response.status_code == 502 and "Sign-in failed" in response.content.decode()
    assert "_auth_user_id" not in client.session
