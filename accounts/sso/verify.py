"""The ID-token check (OpenID Connect Core 1.0 §3.1.3.7), one function for every way a token arrives: the
portal's sign-in (with the nonce it sent) and the API's exchange of a device-flow token (no nonce there, but
each token is accepted once).

Checked: the signature, by a key in the provider's JWKS and an asymmetric algorithm the provider announces;
`iss` is the configured issuer; `aud` names an accepted client (and `azp` is that client when there are
several audiences); `exp` has not passed and `iat` is not in the future (both with OIDC_CLOCK_SKEW_SECONDS of
slack); `sub` is present; the nonce, where one was sent, is it and has not been used before.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError

from accounts.sso.provider import ProviderMetadata, provider_keys, provider_metadata

MAX_TOKEN_CHARS = 16_384


class TokenRefused(Exception):
    """The ID token is not one to accept; the message says which check it failed."""


@dataclass(frozen=True)
class IdClaims:
    issuer: str
    subject: str
    username: str
    email: str
    name: str
    groups: tuple[str, ...]
    expires_at: int
    audience: str


def _decode(raw: str, meta: ProviderMetadata) -> dict[str, Any]:
    try:
        try:
            token = jwt.decode(raw, provider_keys(meta), algorithms=meta.algorithms)
        except InvalidKeyIdError:  # a key the provider rotated in since the keys were cached
            token = jwt.decode(raw, provider_keys(meta, refresh=True), algorithms=meta.algorithms)
    except InvalidKeyIdError as exc:
        raise TokenRefused("it is signed with a key the provider does not publish") from exc
    except JoseError as exc:
        raise TokenRefused(f"its signature does not verify ({exc.error})") from exc
    except ValueError as exc:  # not a JWT at all (bad base64 or JSON)
        raise TokenRefused("it is not a signed JWT") from exc
    return dict(token.claims)


def _audience(claims: dict[str, Any], audiences: Collection[str]) -> str:
    aud = claims.get("aud")
    listed = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    accepted = [a for a in listed if isinstance(a, str) and a in audiences]
    if not accepted:
        raise TokenRefused("it was issued for another client (aud)")
    if len(listed) > 1 and claims.get("azp") not in audiences:
        raise TokenRefused("it names several audiences and its azp is not this client")
    return accepted[0]


def _times(claims: dict[str, Any], now: float) -> int:
    skew = settings.OIDC_CLOCK_SKEW_SECONDS
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise TokenRefused("it has no expiry (exp)")
    if exp + skew <= now:
        raise TokenRefused("it has expired (exp)")
    if isinstance(iat, int | float) and not isinstance(iat, bool) and iat - skew > now:
        raise TokenRefused("it was issued in the future (iat)")
    return int(exp)


def _once(kind: str, value: str, expires_at: int, now: float) -> None:
    """Remember `value` until the token expires; a second use inside that time is a replay."""
    key = f"oidc:{kind}:{hashlib.sha256(value.encode()).hexdigest()}"
    ttl = max(1, int(expires_at - now) + settings.OIDC_CLOCK_SKEW_SECONDS)
    if not cache.add(key, 1, ttl):
        raise TokenRefused(f"its {kind} was used before (replay)")


def _groups(claims: dict[str, Any]) -> tuple[str, ...]:
    value = claims.get(settings.OIDC_GROUPS_CLAIM, [])
    if isinstance(value, str):
        value = [value]
    return tuple(sorted({g for g in value if isinstance(g, str) and g})) if isinstance(value, list) else ()


def verify_id_token(
    raw: str,
    *,
    audiences: Collection[str],
    nonce: str | None = None,
    single_use: bool = False,
    issuer: str | None = None,
    now: float | None = None,
) -> IdClaims:
    """The token's claims once every check passes; TokenRefused naming the first that failed.

    `nonce`: the one sent with the authorization request (the portal), required to match and used once.
    `single_use`: accept this exact token only once (the API exchange, whose tokens carry no nonce)."""
    issuer = issuer or settings.OIDC_ISSUER
    now = time.time() if now is None else now
    if not raw or len(raw) > MAX_TOKEN_CHARS:
        raise TokenRefused("it is empty or too long")
    meta = provider_metadata(issuer)
    claims = _decode(raw, meta)
    if claims.get("iss") != issuer:
        raise TokenRefused("it was issued by another provider (iss)")
    audience = _audience(claims, audiences)
    expires_at = _times(claims, now)
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise TokenRefused("it names no subject (sub)")
    if nonce is not None:
        if claims.get("nonce") != nonce:
            raise TokenRefused("its nonce is not the one this sign-in sent")
        _once("nonce", nonce, expires_at, now)
    if single_use:
        _once("token", raw, expires_at, now)
    return IdClaims(
        issuer=issuer,
        subject=subject,
        username=str(claims.get("preferred_username") or ""),
        email=str(claims.get("email") or "") if claims.get("email_verified", True) is not False else "",
        name=str(claims.get("name") or ""),
        groups=_groups(claims),
        expires_at=expires_at,
        audience=audience,
    )
