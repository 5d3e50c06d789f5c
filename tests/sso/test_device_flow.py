"""The device-flow client (oidc_device) against node-oidc-provider: discovery, the device code, polling while
the sign-in is pending, expiry. The approved path runs in tests/browser/test_sso.py (a browser confirms)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from oidc_device import DeviceFlowError, DevicePrompt, device_login, discover
from oidc_device.flow import SLOW_DOWN_S
from tests.oidc import CLI_CLIENT, OidcProvider, TestKeyIssuer, start_provider

pytestmark = pytest.mark.integration  # starts node-oidc-provider


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    started = start_provider(tmp_path_factory.mktemp("oidc"), redirect_uris=["http://127.0.0.1:9/cb"])
    yield started
    started.stop()


class FakeTime:
    """Sleeps that take no time, on a clock they move: 600 s of polling in well under a second."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_discovery_finds_the_device_endpoint(provider):
    with httpx.Client() as http:
        doc = discover(provider.issuer + "/", http=http)
    assert doc["device_authorization_endpoint"] == f"{provider.issuer}/device/auth"


def test_pending_until_the_code_expires(provider):
    prompts: list[DevicePrompt] = []
    fake = FakeTime()
    with pytest.raises(DeviceFlowError) as refused:
        device_login(provider.issuer, CLI_CLIENT, prompt=prompts.append, sleep=fake.sleep, clock=fake.clock)
    assert refused.value.code == "expired_token"
    (shown,) = prompts
    assert shown.verification_uri == f"{provider.issuer}/device"
    assert shown.user_code in (shown.verification_uri_complete or "")
    # The provider named no interval: RFC 8628's 5 s, kept while it says authorization_pending.
    assert set(fake.sleeps) == {5} and sum(fake.sleeps) >= shown.expires_in


def test_unknown_client_is_refused_by_the_provider(provider):
    with pytest.raises(DeviceFlowError) as refused:
        device_login(provider.issuer, "no-such-client", prompt=lambda p: None)
    assert refused.value.code == "invalid_client"


def test_a_provider_without_device_flow_says_so():
    issuer = TestKeyIssuer()
    try:
        with pytest.raises(DeviceFlowError) as refused:
            device_login(issuer.issuer, CLI_CLIENT, prompt=lambda p: None)
        assert refused.value.code == "unsupported"
    finally:
        issuer.stop()


def test_slow_down_and_denial():
    """node-oidc-provider never answers slow_down, so this one branch runs against scripted answers: each
    slow_down adds 5 s to the interval for good (RFC 8628 §3.5), and access_denied ends the flow."""
    issuer = "https://idp.example.org"
    answers = iter(
        ["authorization_pending", "slow_down", "authorization_pending", "slow_down", "access_denied"]
    )

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            doc = {
                "issuer": issuer,
                "device_authorization_endpoint": f"{issuer}/device",
                "token_endpoint": f"{issuer}/token",
            }
            return httpx.Response(200, json=doc)
        if request.url.path == "/device":
            return httpx.Response(
                200,
                json={
                    "device_code": "d",
                    "user_code": "ABCD-EFGH",
                    "verification_uri": f"{issuer}/device",
                    "interval": 2,
                },
            )
        return httpx.Response(400, json={"error": next(answers)})

    fake = FakeTime()
    with (
        httpx.Client(transport=httpx.MockTransport(handle)) as http,
        pytest.raises(DeviceFlowError) as refused,
    ):
        device_login(issuer, CLI_CLIENT, prompt=lambda p: None, http=http, sleep=fake.sleep, clock=fake.clock)
    assert refused.value.code == "access_denied"
    assert fake.sleeps == [2, 2, 2 + SLOW_DOWN_S, 2 + SLOW_DOWN_S, 2 + 2 * SLOW_DOWN_S]
