"""The provider's discovery document and signing keys, fetched over HTTPS and cached (Redis), so a sign-in
costs no extra round trip; the keys are fetched again when a token names a key not yet seen (rotation)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, cast

import httpx
from django.conf import settings
from django.core.cache import cache
from joserfc.jwk import KeySet

CACHE_SECONDS = 3600
# Asymmetric algorithms only: HS256 would be keyed with the client secret, and "none" is no signature.
SIGNING_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


class ProviderUnavailable(Exception):
    """The provider could not be reached, or answered with something that is not what OpenID promises."""


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    device_authorization_endpoint: str
    algorithms: tuple[str, ...]


def _key(kind: str, issuer: str) -> str:
    return f"oidc:{kind}:{hashlib.sha256(issuer.encode()).hexdigest()[:32]}"


def _get_json(url: str) -> Any:
    try:
        response = httpx.get(url, timeout=settings.OIDC_HTTP_TIMEOUT_S, follow_redirects=False)
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc


def provider_metadata(issuer: str) -> ProviderMetadata:
    """OpenID Connect Discovery 1.0 §4: the document at ISSUER/.well-known/openid-configuration, whose
    `issuer` must be the configured one exactly (§4.3; else another provider could stand in)."""
    doc = cache.get(_key("meta", issuer))
    if doc is None:
        doc = _get_json(f"{issuer}/.well-known/openid-configuration")
        if not isinstance(doc, dict) or doc.get("issuer") != issuer:
            raise ProviderUnavailable(f"{issuer}: the discovery document names another issuer")
        cache.set(_key("meta", issuer), doc, CACHE_SECONDS)
    try:
        return ProviderMetadata(
            issuer=issuer,
            authorization_endpoint=str(doc["authorization_endpoint"]),
            token_endpoint=str(doc["token_endpoint"]),
            jwks_uri=str(doc["jwks_uri"]),
            device_authorization_endpoint=str(doc.get("device_authorization_endpoint") or ""),
            algorithms=tuple(
                a
                for a in doc.get("id_token_signing_alg_values_supported", ["RS256"])
                if a in SIGNING_ALGORITHMS
            ),
        )
    except KeyError as exc:
        raise ProviderUnavailable(f"{issuer}: the discovery document lacks {exc.args[0]}") from exc


def provider_keys(meta: ProviderMetadata, *, refresh: bool = False) -> KeySet:
    """The provider's public signing keys (its JWKS)."""
    raw = None if refresh else cache.get(_key("jwks", meta.issuer))
    if raw is None:
        raw = _get_json(meta.jwks_uri)
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
            raise ProviderUnavailable(f"{meta.jwks_uri}: not a JSON Web Key Set")
        # Public keys only: a provider that published private parts must not make us keep them.
        raw = {
            "keys": [
                {k: v for k, v in key.items() if k not in ("d", "p", "q", "dp", "dq", "qi", "k")}
                for key in raw["keys"]
                if isinstance(key, dict)
            ]
        }
        cache.set(_key("jwks", meta.issuer), raw, CACHE_SECONDS)
    try:
        return KeySet.import_key_set(cast(Any, raw))
    except Exception as exc:  # joserfc raises several kinds for a malformed key
        raise ProviderUnavailable(f"{meta.jwks_uri}: {exc}") from exc


def code_exchange(meta: ProviderMetadata, *, code: str, redirect_uri: str, code_verifier: str) -> str:
    """The authorization code traded at the token endpoint (with the PKCE verifier) for the ID token."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": code_verifier,
    }
    auth = None
    if settings.OIDC_CLIENT_SECRET:
        auth = httpx.BasicAuth(settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET)
    else:
        form["client_id"] = settings.OIDC_CLIENT_ID
    try:
        response = httpx.post(meta.token_endpoint, data=form, auth=auth, timeout=settings.OIDC_HTTP_TIMEOUT_S)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnavailable(f"{meta.token_endpoint}: {exc}") from exc
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("id_token"), str):
        error = body.get("error_description") or body.get("error") if isinstance(body, dict) else None
        raise ProviderUnavailable(f"the provider refused the sign-in code ({error or response.status_code})")
    return str(body["id_token"])
