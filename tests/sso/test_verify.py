"""The ID-token check refuses what OpenID Connect Core §3.1.3.7 says to refuse. Tokens are signed by a key the
test holds and served at a JWKS URL (tests/oidc.TestKeyIssuer); the sign-in flow itself is tested against
node-oidc-provider (tests/browser/test_sso.py)."""

from __future__ import annotations

import secrets
import time

import pytest
from joserfc.jwk import RSAKey

from accounts.sso.verify import TokenRefused, verify_id_token
from tests.oidc import CLI_CLIENT, WEB_CLIENT, TestKeyIssuer

pytestmark = pytest.mark.django_db


def _claims(issuer: TestKeyIssuer, **over):
    now = int(time.time())
    claims = {"iss": issuer.issuer, "sub": "u-1", "aud": WEB_CLIENT, "iat": now, "exp": now + 300}
    claims |= {"preferred_username": "zoe", "groups": ["ml", "ops"], "nonce": over.pop("nonce", "n-1")}
    return claims | over


def _refused(raw: str, match: str, **kwargs) -> None:
    with pytest.raises(TokenRefused, match=match):
        verify_id_token(raw, audiences=kwargs.pop("audiences", [WEB_CLIENT]), **kwargs)


def test_a_good_token_gives_its_claims(sso_settings, key_issuer):
    nonce = secrets.token_urlsafe()
    claims = verify_id_token(
        key_issuer.sign(_claims(key_issuer, nonce=nonce)), audiences=[WEB_CLIENT], nonce=nonce
    )
    assert (claims.issuer, claims.subject, claims.username) == (key_issuer.issuer, "u-1", "zoe")
    assert claims.groups == ("ml", "ops")


def test_wrong_audience_is_refused(sso_settings, key_issuer):
    _refused(key_issuer.sign(_claims(key_issuer, aud="someone-else")), r"another client \(aud\)")
    # A CLI token is not a portal token: the portal accepts only its own client.
    _refused(key_issuer.sign(_claims(key_issuer, aud=CLI_CLIENT)), r"another client")


def test_several_audiences_need_azp_to_be_us(sso_settings, key_issuer):
    raw = key_issuer.sign(_claims(key_issuer, aud=[WEB_CLIENT, "other"], azp="other"))
    _refused(raw, "azp")
    ok = key_issuer.sign(_claims(key_issuer, aud=[WEB_CLIENT, "other"], azp=WEB_CLIENT))
    assert verify_id_token(ok, audiences=[WEB_CLIENT]).audience == WEB_CLIENT


def test_expired_token_is_refused(sso_settings, key_issuer):
    now = int(time.time())
    _refused(key_issuer.sign(_claims(key_issuer, iat=now - 600, exp=now - 1)), r"expired \(exp\)")
    _refused(key_issuer.sign(_claims(key_issuer, exp=None)), r"no expiry")
    _refused(key_issuer.sign(_claims(key_issuer, iat=now + 600)), "in the future")


def test_unknown_issuer_is_refused(sso_settings, key_issuer):
    _refused(key_issuer.sign(_claims(key_issuer, iss="https://evil.example")), r"another provider \(iss\)")


def test_nonce_must_match_and_is_good_once(sso_settings, key_issuer):
    nonce = secrets.token_urlsafe()
    _refused(key_issuer.sign(_claims(key_issuer, nonce="other")), "nonce is not", nonce=nonce)
    raw = key_issuer.sign(_claims(key_issuer, nonce=nonce))
    verify_id_token(raw, audiences=[WEB_CLIENT], nonce=nonce)
    _refused(raw, r"nonce was used before \(replay\)", nonce=nonce)
    # The same nonce in a freshly signed token is still a replay.
    _refused(key_issuer.sign(_claims(key_issuer, nonce=nonce, sub="u-2")), "replay", nonce=nonce)


def test_single_use_tokens_are_good_once(sso_settings, key_issuer):
    raw = key_issuer.sign(_claims(key_issuer, aud=CLI_CLIENT, nonce=None))
    verify_id_token(raw, audiences=[CLI_CLIENT], single_use=True)
    _refused(raw, "token was used before", audiences=[CLI_CLIENT], single_use=True)


def test_signature_must_be_the_providers(sso_settings, key_issuer):
    stranger = RSAKey.generate_key(2048, parameters={"kid": "test-key"})
    _refused(key_issuer.sign(_claims(key_issuer), key=stranger), "signature does not verify")
    raw = key_issuer.sign(_claims(key_issuer))
    head, body, sig = raw.split(".")
    _refused(f"{head}.{body[:-4]}AAAA.{sig}", "signature|not a signed JWT")
    _refused("not-a-jwt", "not a signed JWT|signature")
    _refused("", "empty")


def test_unsigned_and_symmetric_tokens_are_refused(sso_settings, key_issuer):
    import base64
    import json

    def b64(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    unsigned = f"{b64({'alg': 'none'})}.{b64(_claims(key_issuer))}."
    _refused(unsigned, "signature|not a signed JWT")
    from joserfc import jwt
    from joserfc.jwk import OctKey

    hs = jwt.encode({"alg": "HS256"}, _claims(key_issuer), OctKey.import_key("web-client-secret-" * 3))
    _refused(hs, "signature")


def test_no_subject_is_refused(sso_settings, key_issuer):
    _refused(key_issuer.sign(_claims(key_issuer, sub="")), r"no subject")
