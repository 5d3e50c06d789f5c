"""The one idempotency path (docs/reliability.md §Idempotency; issue 37 §4).

Every write that takes an `Idempotency-Key` (job submit from the API and the portal, spend-alert create, the
ledger's top-up and refund, the policy proposal and revert from the API and the console) follows one rule:

- a key is 1 to KEY_MAX_CHARS printable ASCII characters, not only spaces (`check_key`, `header_key`);
- its scope is the tenant (the platform, for platform-wide policy) and the kind of write: the same key in
  another tenant or for another kind of write is another key;
- the same key with the same request answers what the first one made and writes nothing; with another request
  it is refused, 409 `idempotency_key_reused` naming the header (`IdempotencyKeyReused`, `reused`);
- concurrent duplicates apply once: the row that records the key is unique on (scope, key), so the second
  insert waits for the first, fails, and finds it (`replay_or_create`); the policy writers serialise on their
  lock instead;
- a key lives as long as the row that recorded it (a job until retention deletes it, a rule until it is
  deleted, a journal entry and a policy version for ever).

This module lives in config, the bottom layer, so every app (market's services and API, the portal, the
clients' server side) uses it without importing a layer above it. A request's digest is its body as canonical
JSON (config/parsers.canonical_json): `"max_hours": 3` and `3.0` are one request, `"3"` another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.db import IntegrityError
from drf_spectacular.utils import OpenApiParameter

from config.errors import PolicyError
from config.parsers import canonical_json

HEADER = "Idempotency-Key"
KEY_MAX_CHARS = 200
# What a schema says of a key: printable ASCII, not only spaces, at most KEY_MAX_CHARS.
KEY_TEXT = r"[ -~]*[!-~][ -~]*"
KEY_PATTERN = f"^{KEY_TEXT}$"
# As a header: HTTP trims spaces around a field value (RFC 9110 §5.5), so a header key neither starts nor ends
# with one (else the body's copy of it would differ from what arrives).
HEADER_PATTERN = r"^[!-~]([ -~]*[!-~])?$"
KEY_RULE = f"must be 1 to {KEY_MAX_CHARS} printable ASCII characters"
BLANK = "must not be empty or blank when given"

T = TypeVar("T")


class IdempotencyKeyReused(PolicyError):
    """A key already used for another request: 409 `idempotency_key_reused` at every door, naming `field`."""

    code = "idempotency_key_reused"

    def __init__(self, message: str, *, field: str = HEADER) -> None:
        super().__init__(field, message)


def reused(key: str, first: str, *, field: str = HEADER) -> IdempotencyKeyReused:
    """The one message: which key, and what its first request made (`first`: "job 12", "spend alert 3")."""
    return IdempotencyKeyReused(
        f"Idempotency-Key {key!r} was already used for a different request ({first}).", field=field
    )


def check_key(key: object, *, field: str = HEADER, required: bool = False) -> str:
    """The key as given, or "" for none (refused with `required`); anything else is a PolicyError naming
    `field` (the header, or the service argument a caller passes it as)."""
    if key is None and not required:
        return ""
    if not isinstance(key, str):
        raise PolicyError(field, "must be a string")
    if not key and not required:
        return ""
    if len(key) > KEY_MAX_CHARS or not all(" " <= c <= "~" for c in key):
        raise PolicyError(field, KEY_RULE)
    if not key.strip(" "):
        raise PolicyError(field, BLANK)
    return key


def header_key(headers: Mapping[str, str]) -> str:
    """The request's Idempotency-Key header, checked ("" without one; given empty or blank it is a 400)."""
    key = headers.get(HEADER)
    if key is None:
        return ""
    if not key.strip(" "):
        raise PolicyError(HEADER, BLANK)
    return check_key(key)


def request_digest(data: Any) -> str:
    """sha256 of the body as canonical JSON: the same request has the same digest. `"max_hours": 3` and
    `"max_hours": 3.0` are the same request; `"max_hours": "3"` is another (a retry resends its own body)."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def replay(
    *,
    key: str,
    found: T | None,
    same: Callable[[T], bool],
    name: Callable[[T], str],
    field: str = HEADER,
    refuse: Callable[[str, str], Exception] | None = None,
) -> T | None:
    """`found`, what the first request under `key` made (None: nothing), if `same` says this request is that
    one; else the one refusal (`refuse(key, name)` builds it where a caller's keys are not all clients', as the
    ledger's system keys)."""
    if not key or found is None:
        return None
    if not same(found):
        raise (refuse or (lambda k, n: reused(k, n, field=field)))(key, name(found))
    return found


def replay_or_create(
    *,
    key: str,
    find: Callable[[], T | None],
    same: Callable[[T], bool],
    name: Callable[[T], str],
    create: Callable[[], T],
    look_first: bool = True,
    field: str = HEADER,
    refuse: Callable[[str, str], Exception] | None = None,
) -> tuple[T, bool]:
    """(what the key's first request made, False), or (create(), True). `create` runs in its own transaction
    or savepoint (transaction.atomic) and inserts the row unique on (scope, key), so that of concurrent
    duplicates one inserts and the others wait on the index, fail, and find it. `look_first=False` skips the
    lookup before a create (a caller that looks up itself where its checks refuse the body)."""
    if key and look_first:
        first = replay(key=key, found=find(), same=same, name=name, field=field, refuse=refuse)
        if first is not None:
            return first, False
    try:
        return create(), True
    except IntegrityError:
        if not key:
            raise
        first = replay(key=key, found=find(), same=same, name=name, field=field, refuse=refuse)
        if first is None:
            raise
        return first, False


def form_digest_before_issue_26(data: dict[str, Any]) -> str:
    """The digest the portal's submit form stored until issue 26 (json.dumps with sorted keys, its default
    spaces and ASCII escapes), which request_digest does not reproduce. Keys never expire (they live on the
    job row), but a portal key is the form's nonce, which lives only in a rendered form: this matters only for
    a form first posted before the change and posted again after it, which must still replay rather than be
    refused as a conflict. Delete it one release after issue 26's."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def key_header(description: str) -> OpenApiParameter:
    """The `Idempotency-Key` header as every write's schema documents it (the one rule above)."""
    return OpenApiParameter(
        HEADER,
        {"type": "string", "pattern": HEADER_PATTERN, "maxLength": KEY_MAX_CHARS},
        OpenApiParameter.HEADER,
        required=False,
        description=f"1 to {KEY_MAX_CHARS} printable ASCII characters, no space first or last. {description}",
    )
