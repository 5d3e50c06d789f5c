"""The session backend for users signed in through the identity provider."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend


class OidcBackend(ModelBackend):
    """Never checks a password: the sign-in view has verified the ID token and calls `login` naming this
    backend. Its sessions stay valid with LOCAL_LOGIN off, when ModelBackend is not in the list."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        return None
