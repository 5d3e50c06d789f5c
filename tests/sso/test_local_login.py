"""Local accounts beside single sign-on: on by default, refused when LOCAL_LOGIN is off; settings that
cannot work together stop the process naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from config.env import check_oidc_settings
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_password_sign_in_works_beside_sso(sso_settings, world):
    response = Client().post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    page = Client().get("/login/").content.decode()
    assert 'id="sso-login"' in page and 'id="id_password"' in page


def test_password_sign_in_refused_when_local_login_is_off(sso_settings, world):
    sso_settings.LOCAL_LOGIN = False
    response = Client().post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 403
    assert "Passwords are off here" in response.content.decode()
    assert "_auth_user_id" not in Client().session


def test_no_sso_button_without_an_issuer(settings, world):
    settings.OIDC_ISSUER = ""
    assert 'id="sso-login"' not in Client().get("/login/").content.decode()
    assert Client().get("/login/sso/").status_code == 404


@pytest.mark.parametrize(
    ("issuer", "client_id", "local", "message"),
    [
        ("", "", False, "LOCAL_LOGIN=0 needs OIDC_ISSUER"),
        ("http://idp.example.org", "web", True, "must be https"),
        ("ftp://idp.example.org", "web", True, "expected an https"),
        ("https://idp.example.org", "", True, "set OIDC_CLIENT_ID"),
    ],
)
def test_settings_that_cannot_work_are_refused(issuer, client_id, local, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        check_oidc_settings(issuer=issuer, client_id=client_id, cli_client_id="", local_login=local)


def test_loopback_http_and_https_issuers_are_fine():
    check_oidc_settings(issuer="http://127.0.0.1:9000", client_id="web", cli_client_id="", local_login=True)
    check_oidc_settings(
        issuer="https://idp.example.org", client_id="", cli_client_id="cli", local_login=False
    )
