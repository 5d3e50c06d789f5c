"""The webhook POST connects to the addresses it checked (no DNS rebinding), keeps the URL's host name for the
Host header and, for https, for SNI and certificate checks, and still reaches a real local receiver when private
addresses are allowed."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import pytest

from market.services import webhooks
from tests.market.alert_helpers import webhook_receiver

PUBLIC = "93.184.216.34"  # a global address; nothing is ever sent to it (the connection is stubbed)


def _info(address: str, port: int) -> list[Any]:
    return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]


class RebindingResolver:
    """A hostile DNS server for `rebind.example`: a public address the first time, 127.0.0.1 after that.
    Every other name (the IP literals a socket call passes) resolves for real."""

    def __init__(self) -> None:
        self.asked = 0
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "rebind.example":
            return self.real(host, port, *args, **kwargs)
        self.asked += 1
        return _info(PUBLIC if self.asked == 1 else "127.0.0.1", int(port))


def test_a_rebinding_resolver_never_gets_a_connection_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = RebindingResolver()
    connected: list[tuple[str, int]] = []
    real_connect = socket.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        connected.append(address)
        if address[0] == PUBLIC:  # stands in for the outside world: refused, without touching the network
            raise ConnectionRefusedError("refused")
        return real_connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    with webhook_receiver([200]) as server:
        port = int(server.url.split(":")[2].split("/")[0])
        got = webhooks.post(
            url=f"http://rebind.example:{port}/hooks",
            secret="s",
            body=b"{}",
            alert_id="1",
            timeout_s=2,
            allow_private=False,
        )
    assert resolver.asked == 1  # resolved once, for the check
    assert connected == [(PUBLIC, port)]  # and connected to what was checked
    assert server.received == []  # the loopback receiver got nothing
    assert not got.ok and not got.permanent and "ConnectionRefusedError" in got.error


def test_a_name_resolving_to_a_private_address_is_refused_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda host, port, *a, **k: [*_info(PUBLIC, port), *_info("10.0.0.5", port)]
    )
    got = webhooks.post(
        url="https://mixed.example/h", secret="s", body=b"{}", alert_id="1", timeout_s=2, allow_private=False
    )
    assert got.permanent and not got.ok and "10.0.0.5" in got.error


def test_a_local_receiver_gets_the_post_when_private_addresses_are_allowed() -> None:
    with webhook_receiver([200]) as server:
        got = webhooks.post(
            url=server.url + "?x=1#frag",
            secret="s",
            body=b'{"a": 1}',
            alert_id="7",
            timeout_s=5,
            allow_private=True,
        )
    assert got.ok and got.status_code == 200
    (received,) = server.received
    assert received.body == b'{"a": 1}' and received.headers["X-Gpumarket-Alert"] == "7"
    assert received.headers["Host"] == server.url.split("/")[2]
    assert server.signature_ok("s", received)


def test_a_redirect_is_not_followed() -> None:
    with webhook_receiver([302]) as server:
        got = webhooks.post(
            url=server.url, secret="s", body=b"{}", alert_id="1", timeout_s=5, allow_private=True
        )
    assert got.status_code == 302 and not got.ok and "302" in got.error and len(server.received) == 1


class FakeTLS:
    """Records what the TLS layer was asked to verify against."""

    verify_mode = ssl.CERT_REQUIRED
    check_hostname = True

    def __init__(self) -> None:
        self.server_hostname: str | None = None

    def wrap_socket(self, sock: Any, *, server_hostname: str | None = None, **kwargs: Any) -> Any:
        self.server_hostname = server_hostname
        return sock


def test_https_connects_to_the_checked_address_with_the_host_name_for_sni(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[tuple[str, int]] = []
    listener = socket.create_server(("127.0.0.1", 0))
    real_connect = socket.create_connection

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        opened.append(address)  # recorded, then carried to a local listener instead of the public address
        return real_connect(listener.getsockname(), *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    tls = FakeTLS()
    conn, target = webhooks.connection(
        "https://hooks.example.org:8443/in?k=v#frag",
        addresses=[PUBLIC],
        timeout_s=5,
        context=tls,  # type: ignore[arg-type]  # a stand-in recording server_hostname
    )
    assert isinstance(conn, webhooks._PinnedHTTPS) and target == "/in?k=v"
    conn.request("POST", target, body=b"{}", headers={"Content-Type": "application/json"})
    b, _ = listener.accept()
    sent = b.recv(4096)
    conn.close()
    b.close()
    listener.close()
    assert opened == [(PUBLIC, 8443)]  # the socket goes to the checked address ...
    assert tls.server_hostname == "hooks.example.org"  # ... TLS names the host (SNI, certificate check) ...
    assert b"\r\nHost: hooks.example.org:8443\r\n" in sent  # ... and so does the Host header
    assert sent.startswith(b"POST /in?k=v HTTP/1.1\r\n")


def test_https_uses_a_verifying_context_by_default() -> None:
    conn, target = webhooks.connection("https://hooks.example.org/", addresses=[PUBLIC], timeout_s=5)
    assert isinstance(conn, webhooks._PinnedHTTPS) and target == "/"
    assert conn.tls_context.verify_mode == ssl.CERT_REQUIRED and conn.tls_context.check_hostname
    assert conn.host == "hooks.example.org" and conn.port == 443
