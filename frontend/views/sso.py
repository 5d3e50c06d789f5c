"""Signing in through the organisation's identity provider: OpenID Connect's authorization code flow with
PKCE (RFC 7636), a state and a nonce per attempt (docs/sso.md)."""

from __future__ import annotations

import secrets
from typing import Any

from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from django.conf import settings
from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from accounts.sso.provider import ProviderUnavailable, code_exchange, provider_metadata
from accounts.sso.services import SignInRefused, sso_sign_in
from accounts.sso.verify import TokenRefused, verify_id_token

SESSION_KEY = "oidc_pending"
# Sign-ins started and not finished that one browser session keeps (a few tabs); the oldest goes first.
PENDING_MAX = 5


def sso_enabled() -> bool:
    return bool(settings.OIDC_ISSUER and settings.OIDC_CLIENT_ID)


def _callback_uri(request: HttpRequest) -> str:
    return request.build_absolute_uri(reverse("frontend:sso_callback"))


def _refused(request: HttpRequest, reason: str, status: int = 400) -> HttpResponse:
    context: dict[str, Any] = {"sso_error": reason, "sso_enabled": True}
    context |= {"sso_name": settings.OIDC_PROVIDER_NAME, "local_login": settings.LOCAL_LOGIN}
    return render(request, "frontend/login.html", context, status=status)


@require_GET
def sso_start(request: HttpRequest) -> HttpResponse:
    if not sso_enabled():
        raise Http404("Single sign-on is not configured.")
    try:
        meta = provider_metadata(settings.OIDC_ISSUER)
    except ProviderUnavailable:
        return _refused(
            request, f"{settings.OIDC_PROVIDER_NAME}'s sign-in cannot be reached; try again.", 503
        )
    state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
    nxt = request.GET.get("next", "")
    pending = dict(list(request.session.get(SESSION_KEY, {}).items())[-(PENDING_MAX - 1) :])
    pending[state] = {"nonce": nonce, "verifier": verifier, "next": nxt}
    request.session[SESSION_KEY] = pending
    uri = prepare_grant_uri(
        meta.authorization_endpoint,
        settings.OIDC_CLIENT_ID,
        "code",
        redirect_uri=_callback_uri(request),
        scope=" ".join(settings.OIDC_SCOPES),
        state=state,
        nonce=nonce,
        code_challenge=create_s256_code_challenge(verifier),
        code_challenge_method="S256",
    )
    return redirect(uri)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    if not sso_enabled():
        raise Http404("Single sign-on is not configured.")
    pending = dict(request.session.get(SESSION_KEY, {}))
    attempt = pending.pop(request.GET.get("state", ""), None)
    request.session[SESSION_KEY] = pending  # a state is good for one callback only
    if attempt is None:
        return _refused(request, "This sign-in was finished or has expired; sign in again.")
    if request.GET.get("error"):
        return _refused(
            request, f"{settings.OIDC_PROVIDER_NAME} did not sign you in: {request.GET['error']}."
        )
    # RFC 9207: a provider that says who answered must be ours (a mix-up attack swaps providers here).
    if request.GET.get("iss") not in (None, settings.OIDC_ISSUER):
        return _refused(request, "The answer came from another provider.")
    try:
        meta = provider_metadata(settings.OIDC_ISSUER)
        raw = code_exchange(
            meta,
            code=request.GET.get("code", ""),
            redirect_uri=_callback_uri(request),
            code_verifier=attempt["verifier"],
        )
        claims = verify_id_token(raw, audiences=[settings.OIDC_CLIENT_ID], nonce=attempt["nonce"])
        user = sso_sign_in(claims=claims)
    except ProviderUnavailable as exc:
        return _refused(request, f"Sign-in failed: {exc}", 502)
    except TokenRefused as exc:
        return _refused(request, f"Sign-in refused: the provider's ID token was not accepted: {exc}.")
    except SignInRefused as exc:
        return _refused(request, f"Sign-in refused: {exc}.", 403)
    login(request, user, backend="accounts.sso.backend.OidcBackend")
    nxt = attempt.get("next", "")
    if not url_has_allowed_host_and_scheme(nxt, {request.get_host()}, require_https=request.is_secure()):
        nxt = reverse(settings.LOGIN_REDIRECT_URL)
    return redirect(nxt)
