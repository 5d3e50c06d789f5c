"""Signing in through node-oidc-provider (OpenID Certified) in a real browser: its login and consent pages,
the authorization code with PKCE, the ID token checked, the user matched by subject and their team from the
groups claim; group changes apply at the next sign-in; the device flow driven end to end (docs/sso.md)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accounts.models import AuditEvent, GroupMapping, Membership, OidcIdentity, Role, User
from accounts.sso.verify import TokenRefused, verify_id_token
from oidc_device import DevicePrompt, device_login, exchange_for_api_token
from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.oidc import CLI_CLIENT, WEB_CLIENT, WEB_SECRET, OidcProvider, start_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def provider(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    started = start_provider(
        tmp_path_factory.mktemp("oidc"), redirect_uris=[f"{live_server.url}/login/sso/callback/"]
    )
    yield started
    started.stop()


@pytest.fixture
def sso(settings: Any, provider: OidcProvider, world: World) -> OidcProvider:
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = WEB_CLIENT
    settings.OIDC_CLIENT_SECRET = WEB_SECRET
    settings.OIDC_CLI_CLIENT_ID = CLI_CLIENT
    settings.OIDC_PROVIDER_NAME = "Example Corp"
    GroupMapping.objects.create(group="ml-team", tenant=world.alpha, role=Role.MEMBER)
    GroupMapping.objects.create(group="ml-leads", tenant=world.alpha, role=Role.MANAGER)
    GroupMapping.objects.create(group="bio", tenant=world.beta, role=Role.MEMBER)
    return provider


def _provider_login(page: Any, subject: str) -> None:
    """node-oidc-provider's development login page (any password), then its consent page if it asks."""
    page.wait_for_selector("input[name=login]")
    page.fill("input[name=login]", subject)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    if page.locator("input[name=prompt][value=consent]").count():
        page.click("button[type=submit]")
        page.wait_for_load_state()


def _sign_in(page: Any, url: str, subject: str) -> None:
    page.goto(f"{url}/login/")
    page.click("#sso-login")
    _provider_login(page, subject)


def test_sign_in_through_the_provider_lands_on_the_mapped_team(
    sso: OidcProvider, world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    # A local account already called "zoe" with the same address: single sign-on must not take it over.
    local = User.objects.create_user("zoe", email="zoe@example.org", password="x" * 20)
    sso.set_user("zoe", email="zoe@example.org", email_verified=True, name="Zoe", groups=["ml-team", "staff"])
    page.goto(f"{live_server.url}/login/")
    assert page.locator("#sso-login").inner_text() == "Sign in with Example Corp"
    shot(page, tmp_path, "sso-login", docs=True)
    _sign_in(page, live_server.url, "zoe")
    page.wait_for_selector("[data-field=available]")
    assert page.url.endswith("/t/alpha/")
    assert page.locator("header .role").inner_text() == "member"
    shot(page, tmp_path, "sso-signed-in", docs=True)

    identity = OidcIdentity.objects.select_related("user").get(issuer=sso.issuer, subject="zoe")
    assert identity.user != local and identity.user.username.startswith("zoe-")
    assert not identity.user.has_usable_password()
    assert identity.groups == ["ml-team", "staff"]
    assert Membership.objects.get(user=identity.user, tenant=world.alpha).role == Role.MEMBER

    # Promoted to the leads group and moved from ml to bio: both show at the next sign-in, audited.
    sso.set_user("zoe", email="zoe@example.org", groups=["ml-leads", "bio"])
    page.context.clear_cookies()
    _sign_in(page, live_server.url, "zoe")
    page.wait_for_selector("[data-field=available]")
    assert Membership.objects.get(user=identity.user, tenant=world.alpha).role == Role.MANAGER
    assert Membership.objects.filter(user=identity.user, tenant=world.beta).exists()

    # Out of every mapped group: the memberships go at the next sign-in (and the user's tokens with them).
    sso.set_user("zoe", email="zoe@example.org", groups=["staff"])
    page.context.clear_cookies()
    _sign_in(page, live_server.url, "zoe")
    page.wait_for_load_state()
    assert not Membership.objects.filter(user=identity.user).exists()
    assert "/t/" not in page.url
    shot(page, tmp_path, "sso-no-team")
    actions = list(
        AuditEvent.objects.filter(action__startswith="sso.membership.", detail__user=identity.user.username)
        .order_by("id")
        .values_list("action", "tenant__slug")
    )
    assert actions == [
        ("sso.membership.set", "alpha"),
        ("sso.membership.set", "alpha"),
        ("sso.membership.set", "beta"),
        ("sso.membership.remove", "alpha"),
        ("sso.membership.remove", "beta"),
    ]
    assert AuditEvent.objects.filter(action="sso.user.create", detail__subject="zoe").count() == 1


def test_replayed_callback_is_refused(sso: OidcProvider, world: World, live_server: Any, page: Any) -> None:
    sso.set_user("yan", groups=["ml-team"])
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/login/sso/callback/" in r.url else None)
    _sign_in(page, live_server.url, "yan")
    page.wait_for_selector("[data-field=available]")
    # The same answer again (state, code): the state was good once, so the sign-in is refused.
    page.context.clear_cookies()
    page.goto(callbacks[0])
    assert "finished or has expired" in page.locator("[role=alert]").inner_text()


def test_local_login_can_be_turned_off(sso: OidcProvider, settings: Any, live_server: Any, page: Any) -> None:
    settings.LOCAL_LOGIN = False
    page.goto(f"{live_server.url}/login/")
    assert page.locator("#sso-login").is_visible()
    assert page.locator("#id_password").count() == 0


def test_device_flow_end_to_end(sso: OidcProvider, world: World, live_server: Any, page: Any) -> None:
    """The command line's sign-in: device flow against the provider (the code confirmed in the browser), the
    ID token traded for an API token in the mapped team, which then works; the same ID token twice is not."""
    sso.set_user("dev", email="dev@example.org", groups=["ml-team"])
    prompts: queue.Queue[DevicePrompt] = queue.Queue()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["tokens"] = device_login(sso.issuer, CLI_CLIENT, prompt=prompts.put)
        except Exception as exc:  # handed to the test thread below
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    shown = prompts.get(timeout=30)
    assert shown.verification_uri_complete and shown.user_code in shown.verification_uri_complete
    _confirm_device(page, shown.verification_uri_complete, "dev")
    thread.join(timeout=60)
    assert "error" not in result, result.get("error")
    tokens = result["tokens"]

    issued = exchange_for_api_token(live_server.url, tokens.id_token)
    assert issued["tenant"] == "alpha" and issued["token"].startswith("gpm_")
    me = httpx.get(f"{live_server.url}/api/v1/me", headers={"Authorization": f"Bearer {issued['token']}"})
    assert me.status_code == 200, me.text
    assert me.json()["tenants"] == [{"slug": "alpha", "name": world.alpha.name, "role": "member"}]

    again = httpx.post(f"{live_server.url}/api/v1/auth/oidc/token", json={"id_token": tokens.id_token})
    assert again.status_code == 400
    assert again.json()["fields"]["id_token"] == ["refused: its token was used before (replay)"]

    # Signed by the real provider's keys, yet refused: made for the command line, not the portal (aud), and
    # once past its expiry.
    with pytest.raises(TokenRefused, match=r"another client \(aud\)"):
        verify_id_token(tokens.id_token, audiences=[WEB_CLIENT])
    with pytest.raises(TokenRefused, match=r"expired \(exp\)"):
        verify_id_token(tokens.id_token, audiences=[CLI_CLIENT], now=time.time() + 3600 + 120)


def _confirm_device(page: Any, url: str, subject: str) -> None:
    """The provider's device pages: confirm the code shown, sign in, consent (signed out of the provider
    first, so each run shows its login page)."""
    page.context.clear_cookies()
    page.goto(url)
    page.click("button[autofocus]")  # "Continue": the code on the page is the one on the terminal
    _provider_login(page, subject)
    page.wait_for_load_state()
    assert "Sign-in Success" in page.title()


def test_device_sign_in_from_the_command_line(
    sso: OidcProvider, world: World, live_server: Any, page: Any
) -> None:
    """`python -m oidc_device` as a process, as a person would run it: it prints where to go, the browser
    confirms, and it prints the API token; a team the person is not in is refused with the field named."""
    sso.set_user("cli-user", groups=["ml-team", "bio"])
    command = [sys.executable, "-m", "oidc_device", "--issuer", sso.issuer, "--client-id", CLI_CLIENT]
    command += ["--server", live_server.url]
    for tenant, code in [("beta", 0), ("gamma", 1)]:
        process = subprocess.Popen(
            [*command, "--tenant", tenant], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("Open "), line
        _confirm_device(page, line.split()[1], "cli-user")
        out, err = process.communicate(timeout=60)
        assert process.returncode == code, err
        if code == 0:
            assert json.loads(out)["tenant"] == "beta"
        else:
            assert "error: exchange (tenant): tenant: you are not a member of 'gamma'" in err


def test_console_mapping_page(
    sso: OidcProvider, world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    login(page, live_server.url, world.admin.username)
    page.goto(f"{live_server.url}/console/sso/")
    page.fill("#id_group", "")
    page.click("#mapping-form button[type=submit]")
    assert "required" in page.locator("#id_group-error").inner_text()
    page.fill("#id_group", "gpu-admins")
    page.select_option("#id_tenant", "gamma")
    page.select_option("#id_role", "manager")
    page.click("#mapping-form button[type=submit]")
    page.wait_for_selector("#mappings code:text('gpu-admins')")
    shot(page, tmp_path, "console-sso", docs=True)
    assert GroupMapping.objects.filter(group="gpu-admins", tenant=world.gamma, role=Role.MANAGER).exists()
