"""The one request digest of an idempotent submit, for both doors (the API and the portal; docs/jobs.md).

A job stores the digest of the request that created it beside its idempotency key; a retry with the same key
is a replay when its digest matches, a conflict (409 idempotency_key_reused, or the portal's form error) when
it does not. Both doors digest here, over the same canonical JSON (config/parsers.canonical_json: keys sorted,
no spaces, numbers by exact value), so "the same request" means one thing (issue 26 §4).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from config.parsers import canonical_json


def request_digest(data: Any) -> str:
    """sha256 of the body as canonical JSON: the same request has the same digest. `"max_hours": 3` and
    `"max_hours": 3.0` are the same request; `"max_hours": "3"` is another (a retry resends its own body)."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def form_digest_before_issue_26(data: dict[str, Any]) -> str:
    """The digest the portal's submit form stored until issue 26 (json.dumps with sorted keys, its default
    spaces and ASCII escapes), which request_digest does not reproduce. Keys never expire (they live on the
    job row), but a portal key is the form's nonce, which lives only in a rendered form: this matters only for
    a form first posted before the change and posted again after it, which must still replay rather than be
    refused as a conflict. Delete it one release after issue 26's."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
