from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oidc import CLI_CLIENT, WEB_CLIENT, TestKeyIssuer


@pytest.fixture(scope="module")
def key_issuer() -> Iterator[TestKeyIssuer]:
    issuer = TestKeyIssuer()
    yield issuer
    issuer.stop()


@pytest.fixture
def sso_settings(settings, key_issuer):
    """Single sign-on on, pointed at the test-key issuer, with no clock slack (the expiry test's)."""
    settings.OIDC_ISSUER = key_issuer.issuer
    settings.OIDC_CLIENT_ID = WEB_CLIENT
    settings.OIDC_CLI_CLIENT_ID = CLI_CLIENT
    settings.OIDC_CLOCK_SKEW_SECONDS = 0
    return settings
