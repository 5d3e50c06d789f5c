"""The two agent secrets (docs/agent.md §Protocol): gpb_ bootstrap tokens and gpn_ node credentials.
Only SHA-256 digests are stored; the secret is shown once."""

from __future__ import annotations

import hashlib
import secrets

BOOTSTRAP_PREFIX = "gpb_"
NODE_PREFIX = "gpn_"
SECRET_MAX_CHARS = 200


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def kind_of(raw: str) -> str | None:
    """ "bootstrap", "node" or None (not an agent secret at all)."""
    if len(raw) > SECRET_MAX_CHARS:
        return None
    if raw.startswith(BOOTSTRAP_PREFIX):
        return "bootstrap"
    if raw.startswith(NODE_PREFIX):
        return "node"
    return None
