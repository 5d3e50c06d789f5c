"""The client's HTTP: retries of a write repeat its Idempotency-Key; errors keep the API's code and field.
Against a real HTTP server on loopback (http.server in a thread) that answers as told."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpumarket_client.errors import ApiError, ConnectionFailed
from gpumarket_client.transport import Transport


class Scripted(ThreadingHTTPServer):
    answers: list[tuple[int, dict[str, str], Any]]
    seen: list[dict[str, str]]


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append(dict(self.headers))
        status, headers, body = self.server.answers.pop(0)
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Scripted]:
    httpd = Scripted(("127.0.0.1", 0), Handler)
    httpd.answers, httpd.seen = [], []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.shutdown()


def url(httpd: Scripted) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_a_retried_write_repeats_its_idempotency_key(
    server: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "gpumarket_client.transport.BACKOFF_S", 0.0
    )  # the retries are checked, not their pacing
    server.answers = [(503, {"Retry-After": "0"}, None), (502, {}, None), (201, {}, {"id": 7})]
    with Transport(url(server), "tok") as http:
        assert http.post("tenants/a/jobs", {"name": "x"}) == {"id": 7}
    keys = {h["Idempotency-Key"] for h in server.seen}
    assert len(server.seen) == 3 and len(keys) == 1 and keys.pop().startswith("gpumarket-cli:")
    assert all(h["Authorization"] == "Bearer tok" for h in server.seen)


def test_each_write_gets_its_own_key_and_reads_get_none(server: Scripted) -> None:
    server.answers = [(200, {}, {}), (200, {}, {}), (200, {}, {})]
    with Transport(url(server), "tok") as http:
        http.post("a")
        http.post("b")
        http.get("c")
    assert server.seen[0]["Idempotency-Key"] != server.seen[1]["Idempotency-Key"]
    assert "Idempotency-Key" not in server.seen[2]


def test_the_apis_error_keeps_its_code_and_field(server: Scripted) -> None:
    body = {
        "error": "invalid",
        "detail": "gpus: must be at least 1",
        "fields": {"gpus": ["must be at least 1"]},
    }
    server.answers = [(400, {}, body), (404, {}, {"error": "not_found", "detail": "Not found."})]
    with Transport(url(server), "tok") as http:
        with pytest.raises(ApiError) as bad:
            http.post("tenants/a/jobs", {})
        assert (bad.value.code, bad.value.field, str(bad.value), bad.value.exit_code) == (
            "invalid",
            "gpus",
            "gpus: must be at least 1",
            3,
        )
        with pytest.raises(ApiError) as missing:
            http.get("tenants/a/jobs/9")
        assert (missing.value.code, missing.value.field, missing.value.exit_code) == ("not_found", None, 5)


def test_a_server_that_stays_down_is_one_error_after_the_retries(server: Scripted) -> None:
    server.answers = [(503, {"Retry-After": "0"}, None)] * 3
    with Transport(url(server), "tok", retries=2) as http, pytest.raises(ConnectionFailed, match="HTTP 503"):
        http.get("me")
    assert len(server.seen) == 3
