"""HTTP + JSON to the platform's agent API (docs/agent.md §Protocol), with the standard library only."""

from __future__ import annotations

import gzip
import json
import random
import urllib.error
import urllib.request
from typing import Any

from nodeagent.agent import VERSION

RETRIED = {409, 429}  # the protocol retries these 4xx like a 5xx
MAX_DETAIL = 300


class Unavailable(Exception):
    """No answer, a 5xx, 409 or 429: try again later (backoff)."""


class Rejected(Exception):
    """A 4xx the protocol does not retry: this request will never succeed as it is."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


def _detail(raw: bytes) -> str:
    """The API's JSON error in one line, else the body's start."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:MAX_DETAIL].decode(errors="replace").strip()
    if isinstance(body, dict):
        parts = [str(body.get(k)) for k in ("error", "detail") if body.get(k)]
        if body.get("fields"):
            parts.append(json.dumps(body["fields"]))
        if parts:
            return " ".join(parts)[:MAX_DETAIL]
    return json.dumps(body)[:MAX_DETAIL]


class Client:
    def __init__(self, server: str, *, timeout: float = 10.0) -> None:
        self.base = server.rstrip("/") + "/api/v1/agent/"
        self.timeout = timeout
        self.secret = ""

    def call(
        self, method: str, path: str, body: Any = None, *, wait: float = 0.0, compress: bool = False
    ) -> Any:
        """The decoded JSON answer. wait: how long the server may hold the request (long poll); compress:
        send the body gzipped (protocol 2's reports: a tenth of the bytes)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if data is not None and compress:
            data = gzip.compress(data, compresslevel=6, mtime=0)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.secret}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", f"gpumarket-agent/{VERSION}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
            if compress:
                request.add_header("Content-Encoding", "gzip")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout + wait) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc.read())
            if exc.code >= 500 or exc.code in RETRIED:
                raise Unavailable(f"{method} {path}: HTTP {exc.code}: {detail}") from None
            raise Rejected(exc.code, detail) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unavailable(f"{method} {path}: {reason}") from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise Unavailable(f"{method} {path}: the answer is not JSON: {raw[:80]!r}") from None


class Backoff:
    """1 s doubling to 60 s, each delay drawn from its upper half (jitter: agents that lost the server at
    the same moment do not come back in step)."""

    def __init__(self, first: float = 1.0, most: float = 60.0) -> None:
        self.first, self.most, self.failures = first, most, 0

    def next_delay(self) -> float:
        ceiling = min(self.most, self.first * 2**self.failures)
        self.failures += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
