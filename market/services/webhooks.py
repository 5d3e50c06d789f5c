"""Signed webhook POSTs for spend alerts (docs/alerts.md §Webhook): the URL rule, the signature, one attempt.

Standard library only, no database: market.services.spend_alerts records each attempt.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from config.errors import PolicyError

URL_MAX_CHARS = 500
SIGNATURE_HEADER = "X-Gpumarket-Signature"
TIMESTAMP_HEADER = "X-Gpumarket-Timestamp"
ALERT_HEADER = "X-Gpumarket-Alert"


def check_webhook_url(url: object, *, allow_private: bool) -> str:
    """http or https, a host, no user or password in it (they would be shown and logged as part of the URL),
    at most 500 characters. An IP literal in a private, loopback, link-local or reserved range is refused
    unless allowed; a host name is resolved and checked again at each delivery (`_public_host`)."""
    if not isinstance(url, str):
        raise PolicyError("webhook_url", "must be a string")
    url = url.strip()
    if not url:
        return ""
    if len(url) > URL_MAX_CHARS:
        raise PolicyError("webhook_url", f"must be at most {URL_MAX_CHARS} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise PolicyError("webhook_url", "must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # a bad port raises here
    except ValueError as exc:
        raise PolicyError("webhook_url", f"is not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https"):
        raise PolicyError("webhook_url", "must start with http:// or https://")
    if not parts.hostname:
        raise PolicyError("webhook_url", "must name a host")
    if parts.username is not None or parts.password is not None:
        raise PolicyError(
            "webhook_url", "must not carry a user name or password; the signature authenticates"
        )
    if port == 0:
        raise PolicyError("webhook_url", "must not use port 0")
    if not allow_private:
        try:
            address = ipaddress.ip_address(parts.hostname)
        except ValueError:
            return url
        if not address.is_global:
            raise PolicyError("webhook_url", "must not point at a private, loopback or link-local address")
    return url


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """HMAC-SHA256 over "<timestamp>." + body, hex: what the receiver recomputes and compares."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


@dataclass(frozen=True)
class Attempt:
    status_code: int | None
    ok: bool
    error: str
    duration_ms: int
    permanent: bool  # retrying cannot help (the address is refused)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it could lead to an address the URL rule would refuse."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _public_host(host: str, port: int) -> str:
    """ "" when every address the host resolves to is global; else why not. A resolver can answer differently
    a moment later (DNS rebinding): this narrows the window, it does not close it (docs/alerts.md)."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        return f"cannot resolve {host}: {exc}"
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not address.is_global:
            return f"{host} resolves to {address}, a non-public address"
    return ""


def post(
    *, url: str, secret: str, body: bytes, alert_id: str, timeout_s: float, allow_private: bool
) -> Attempt:
    """One signed POST of `body` (JSON); never raises."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    parts = urlsplit(url)
    if not allow_private:
        refused = _public_host(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        if refused:
            return Attempt(None, False, refused[:500], took(), permanent=True)
    timestamp = int(time.time())
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "gpumarket-alerts/1",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(secret, timestamp, body),
            ALERT_HEADER: alert_id,
        },
    )
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        with opener.open(request, timeout=timeout_s) as response:
            code = int(response.status)
            return Attempt(code, 200 <= code < 300, "", took(), permanent=False)
    except urllib.error.HTTPError as exc:
        return Attempt(exc.code, False, f"HTTP {exc.code} {exc.reason}"[:500], took(), permanent=False)
    except (OSError, ValueError) as exc:  # refused, timed out, TLS, a malformed answer
        return Attempt(None, False, f"{type(exc).__name__}: {exc}"[:500], took(), permanent=False)
