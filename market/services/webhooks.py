"""Signed webhook POSTs for spend alerts (docs/alerts.md §Webhook): the URL rule, the signature, one attempt.

Standard library only, no database: market.services.spend_alerts records each attempt.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from config.errors import PolicyError

URL_MAX_CHARS = 500
SIGNATURE_HEADER = "X-Gpumarket-Signature"
TIMESTAMP_HEADER = "X-Gpumarket-Timestamp"
ALERT_HEADER = "X-Gpumarket-Alert"


def check_webhook_url(url: object, *, allow_private: bool) -> str:
    """http or https, a host, no user or password in it (they would be shown and logged as part of the URL),
    at most 500 characters. An IP literal in a private, loopback, link-local or reserved range is refused
    unless allowed; a host name is resolved and checked at each delivery, which connects to the checked
    addresses (`resolve`, `post`)."""
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


@dataclass(frozen=True)
class Resolved:
    addresses: list[str]
    error: str = ""  # why there are none to connect to
    refused: bool = False  # a non-public address: permanent, unlike a name that does not resolve yet


def resolve(host: str, port: int, *, allow_private: bool) -> Resolved:
    """The host's addresses, resolved once -- or none and why not: unless private ones are allowed, every
    address must be global (one private answer among public ones refuses them all: the connection could use
    any). The POST then connects to these very addresses (`_PinnedHTTP`, `_PinnedHTTPS`), so a resolver cannot
    answer a public address to this check and a private one to the connection (DNS rebinding)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        return Resolved([], f"cannot resolve {host}: {exc}")
    addresses: list[str] = []
    for info in infos:
        text = str(info[4][0])
        address = ipaddress.ip_address(text.split("%")[0])
        if not allow_private and not address.is_global:
            return Resolved([], f"{host} resolves to {address}, a non-public address", refused=True)
        if text not in addresses:
            addresses.append(text)
    if not addresses:
        return Resolved([], f"cannot resolve {host}: no addresses")
    return Resolved(addresses)


def _connect_pinned(addresses: list[str], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of the checked addresses that answers; no name is resolved here."""
    error: OSError = OSError("no addresses")
    for address in addresses:
        try:
            sock = socket.create_connection((address, port), timeout)
        except OSError as exc:
            error = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise error


class _PinnedHTTP(http.client.HTTPConnection):
    """http.client with the host name kept for the Host header but the socket opened to checked addresses."""

    def __init__(self, host: str, port: int, *, addresses: list[str], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses

    def connect(self) -> None:
        self.sock = _connect_pinned(self.addresses, self.port, self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """The same for https: TLS over the checked address, with the URL's host name for SNI and for verifying the
    certificate (the default context checks the chain and the name)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        addresses: list[str],
        timeout: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        if context is None:
            context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])  # as http.client's own default context does
        super().__init__(host, port, timeout=timeout, context=context)
        self.addresses = addresses
        self.tls_context = context

    def connect(self) -> None:
        sock = _connect_pinned(self.addresses, self.port, self.timeout)
        try:
            self.sock = self.tls_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def connection(
    url: str, *, addresses: list[str], timeout_s: float, context: ssl.SSLContext | None = None
) -> tuple[http.client.HTTPConnection, str]:
    """The pinned connection for `url` and the request target (path and query; the fragment is never sent)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = _PinnedHTTPS(host, parts.port or 443, addresses=addresses, timeout=timeout_s, context=context)
    else:
        conn = _PinnedHTTP(host, parts.port or 80, addresses=addresses, timeout=timeout_s)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return conn, target


def post(
    *, url: str, secret: str, body: bytes, alert_id: str, timeout_s: float, allow_private: bool
) -> Attempt:
    """One signed POST of `body` (JSON) to the addresses the host resolved to when checked; never raises. A
    redirect is not followed (http.client never does): it could lead to an address the URL rule would refuse."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    resolved = resolve(parts.hostname or "", port, allow_private=allow_private)
    if resolved.error:
        # A private address is refused for good; a name that does not resolve yet is retried like a timeout.
        return Attempt(None, False, resolved.error[:500], took(), permanent=resolved.refused)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gpumarket-alerts/1",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
        ALERT_HEADER: alert_id,
    }
    conn, target = connection(url, addresses=resolved.addresses, timeout_s=timeout_s)
    try:
        conn.request("POST", target, body=body, headers=headers)  # Host: the URL's host (and port)
        response = conn.getresponse()
        code = int(response.status)
        if 200 <= code < 300:
            return Attempt(code, True, "", took(), permanent=False)
        return Attempt(code, False, f"HTTP {code} {response.reason}"[:500], took(), permanent=False)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, TLS, a bad answer
        return Attempt(None, False, f"{type(exc).__name__}: {exc}"[:500], took(), permanent=False)
    finally:
        conn.close()
