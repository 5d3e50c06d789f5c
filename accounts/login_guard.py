"""Brute-force guard for every password sign-in (the portal's /login/, the admin's /admin/login/).

Failures are counted per (username, client address) and per client address, on atomic Redis counters
(config/ratelimit.py). Past LOGIN_FAILURES_PER_USER failures for one username from one address, or
LOGIN_FAILURES_PER_ADDRESS failures from one address, within LOGIN_LOCKOUT_SECONDS, every further attempt
is refused without checking the password, until the window ends. A successful sign-in clears the
(username, address) count. The guard is the first authentication backend, so no login view can skip it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver

from config import ratelimit


def _address(request: Any) -> str:
    return str(getattr(request, "META", {}).get("REMOTE_ADDR") or "unknown")


def _names(username: str, request: Any) -> tuple[str, str]:
    address = _address(request)
    return f"login:user:{username.strip().lower()}:{address}", f"login:addr:{address}"


def locked_out(username: str, request: Any) -> bool:
    window = settings.LOGIN_LOCKOUT_SECONDS
    per_user, per_address = _names(username, request)
    return (
        ratelimit.count(per_user, window) >= settings.LOGIN_FAILURES_PER_USER
        or ratelimit.count(per_address, window) >= settings.LOGIN_FAILURES_PER_ADDRESS
    )


class LoginGuardBackend:
    """Refuses (PermissionDenied stops Django's backend chain) while the caller is locked out; otherwise it
    has no opinion and the next backend checks the password."""

    def authenticate(self, request: Any, username: str | None = None, **credentials: Any) -> None:
        if request is not None and username is not None and locked_out(username, request):
            raise PermissionDenied("Too many failed sign-ins; try again later.")
        return None

    def get_user(self, user_id: int) -> Any:
        # A session names the backend that signed it in; `force_login` (and any login that does not say which
        # backend) names the first one, this guard, so it must load the user as the password backend does.
        return ModelBackend().get_user(user_id)


@receiver(user_login_failed, dispatch_uid="login-guard-failed")
def _failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    username = credentials.get("username")
    if request is None or not isinstance(username, str):
        return
    for name in _names(username, request):
        ratelimit.hit(name, settings.LOGIN_LOCKOUT_SECONDS)


@receiver(user_logged_in, dispatch_uid="login-guard-succeeded")
def _succeeded(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if request is not None:
        ratelimit.clear(_names(user.get_username(), request)[0], settings.LOGIN_LOCKOUT_SECONDS)
