"""Ledger test settings."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # The `world` fixture creates seven users; Argon2 makes that ~1.4 s per test, MD5 makes it nothing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
