"""An in-process fake of the platform's agent API (docs/agent.md §Protocol), for the agent's tests.

It keeps what the agent sent, in arrival order, and serves the commands a test queues. `stop()` closes the
listening socket (connections are refused, a real outage); `start()` opens it again on the same port.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

BOOTSTRAP = "gpb_test-bootstrap"
PREFIX = "/api/v1/agent/"


class FakeServer:
    def __init__(self, protocol: int = 1, report_seconds: float = 1.0, poll_seconds: int = 2) -> None:
        # protocol 2: register says so, and `report` is served; each report is also unpacked into the
        # protocol 1 records below (acks, started, usage, exited), so the same checks read either.
        self.protocol, self.report_seconds, self.poll_seconds = protocol, report_seconds, poll_seconds
        self.reports: list[dict[str, Any]] = []  # protocol 2 bodies, in arrival order
        self.encodings: list[str] = []  # each report's Content-Encoding
        self.report_times: list[float] = []
        self.waits: list[int] = []  # each command poll's wait
        self.v1_calls: list[str] = []
        self.lock = threading.Condition()
        self.credential = "gpn_test-credential"
        self.bootstrap_used = False
        self.registrations: list[tuple[int, dict[str, Any]]] = []  # (status, body)
        self.heartbeats: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.acks: dict[int, dict[str, Any]] = {}
        self.usage: list[dict[str, Any]] = []  # every report received, duplicates included
        self.started: dict[int, dict[str, Any]] = {}
        self.exited: dict[int, dict[str, Any]] = {}
        self.exit_order: list[tuple[int, int]] = []  # (lease, number of usage reports received before it)
        self.exit_calls: list[int] = []
        self.usage_answers: list[int] = []
        self.usage_refused: list[tuple[int, int, int]] = []
        self.fence = 1
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = self

        class Handler(_Handler):
            fake = server

        ThreadingHTTPServer.allow_reuse_address = True
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        self._httpd = None

    # ------------------------------------------------------------------ what tests use
    def queue(self, kind: str, lease: int, payload: dict[str, Any], **extra: Any) -> int:
        with self.lock:
            command = {
                "id": len(self.commands) + 100,
                "kind": kind,
                "lease": lease,
                "fence": self.fence,
                "expires_at": (datetime.now(UTC) + timedelta(minutes=5)).isoformat(),
                "payload": payload,
                **extra,
            }
            self.commands.append(command)
            self.lock.notify_all()
            return int(command["id"])

    def bind(
        self,
        lease: int,
        command: str,
        *,
        gpus: list[str],
        max_seconds: float = 600,
        grace: float = 5,
        gang: Any = None,
        **extra: Any,
    ) -> int:
        payload: dict[str, Any] = {
            "lease": lease,
            "job": lease + 1000,
            "name": f"job-{lease}",
            "command": command,
            "gpus": gpus,
            "gang_gpus": len(gpus),
            "max_seconds": max_seconds,
            "grace_seconds": grace,
            "price": 4_500_000,
            **extra,  # tenant, cpus, memory_mb, pids: what the server adds for the sandbox
        }
        if gang is not None:
            payload["gang"] = gang
        return self.queue("bind", lease, payload)

    def stop_lease(self, kind: str, lease: int, *, grace: float = 5) -> int:
        payload = {"lease": lease, "job": lease + 1000, "kind": kind, "grace_seconds": grace, "reason": kind}
        return self.queue(kind, lease, payload)

    def lease_reports(self, lease: int) -> list[dict[str, Any]]:
        with self.lock:
            return [c for r in self.usage for c in r["leases"] if c["lease"] == lease]

    def gpus(self) -> list[str]:
        with self.lock:
            return [g["uuid"] for g in self.registrations[-1][1]["gpus"]]

    # ------------------------------------------------------------------ protocol
    def handle(
        self, method: str, path: str, query: dict[str, str], auth: str, body: Any, encoding: str = ""
    ) -> tuple[int, Any]:
        if path == "register" and method == "POST":
            return self._register(auth, body)
        if auth != f"Bearer {self.credential}":
            return 401, {"error": "not_authenticated", "detail": "Invalid node credential."}
        parts = path.split("/")
        if path == "report" and method == "POST" and self.protocol == 2:
            return self._report(body, encoding)
        if path != "commands":
            self.v1_calls.append(path)
        with self.lock:
            if path == "heartbeat" and method == "POST":
                self.heartbeats.append(body)
                return 200, {"state": "up", "fence": self.fence, "server_time": datetime.now(UTC).isoformat()}
            if path == "usage" and method == "POST":
                if self.usage_answers:  # a status a test queued: 503 (retried), 400 (refused, set aside)
                    status = self.usage_answers.pop(0)
                    self.usage_refused.append((status, body["boot_epoch"], body["seq"]))
                    return status, {
                        "error": "test",
                        "detail": f"answered {status}",
                        "fields": {"seq": ["bad"]},
                    }
                self.usage.append(body)
                return 200, {"acked": body["seq"]}
            if parts[0] == "commands" and len(parts) == 3 and parts[2] == "ack" and method == "POST":
                self.acks[int(parts[1])] = body
                return 200, {"id": int(parts[1])}
            if parts[0] == "leases" and len(parts) == 3 and method == "POST":
                lease = int(parts[1])
                if parts[2] == "started":
                    self.started.setdefault(lease, body)
                    return 200, {"lease": lease, "state": "running"}
                if parts[2] == "exited":
                    self.exit_calls.append(lease)
                    if lease not in self.exited:
                        self.exit_order.append((lease, len(self.usage)))
                    self.exited.setdefault(lease, body)
                    return 200, {"lease": lease, "state": "ended"}
        if path == "commands" and method == "GET":
            wait = int(query.get("wait", 0))
            with self.lock:
                self.waits.append(wait)
            return 200, {"commands": self._commands(int(query.get("after", 0)), min(25, wait))}
        return 404, {"error": "not_found", "detail": f"{method} {path}"}

    def _report(self, body: Any, encoding: str) -> tuple[int, Any]:
        with self.lock:
            if self.usage_answers:  # a status a test queued: 503 (retried), 400 (refused, set aside)
                status = self.usage_answers.pop(0)
                self.usage_refused.append((status, body["boot_epoch"], body["seq"]))
                return status, {"error": "test", "detail": f"answered {status}", "fields": {"seq": ["bad"]}}
            self.reports.append(body)
            self.encodings.append(encoding)
            self.report_times.append(time.monotonic())
            for ack in body.get("acks", []):
                self.acks.setdefault(ack["command"], {"result": ack["result"], "detail": ack["detail"]})
            for started in body.get("started", []):
                self.started.setdefault(started["lease"], {"at": started["at"]})
            if body.get("usage") or body.get("leases"):
                self.usage.append(body)
            for exited in body.get("exited", []):
                lease = exited.pop("lease")
                self.exit_calls.append(lease)
                if lease not in self.exited:
                    self.exit_order.append((lease, len(self.usage)))
                self.exited.setdefault(lease, exited)
            answer = {
                "acked": body["seq"],
                "state": "up",
                "fence": self.fence,
                "server_time": datetime.now(UTC).isoformat(),
                "report_seconds": self.report_seconds,
                "poll_seconds": self.poll_seconds,
            }
            self.lock.notify_all()
            return 200, answer

    def _register(self, auth: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            answer: dict[str, Any] = {
                "node": 12,
                "name": body["name"],
                "heartbeat_seconds": 1,
                "poll_seconds": 1,
            }
            if self.protocol == 2:
                answer |= {
                    "protocol": 2,
                    "poll_seconds": self.poll_seconds,
                    "report_seconds": self.report_seconds,
                }
            if auth == f"Bearer {self.credential}":
                self.registrations.append((200, body))
                return 200, answer
            if auth == f"Bearer {BOOTSTRAP}" and not self.bootstrap_used:
                self.bootstrap_used = True
                self.registrations.append((201, body))
                return 201, {**answer, "credential": self.credential}
            return 401, {"error": "not_authenticated", "detail": "Invalid, used or expired bootstrap token."}

    def _commands(self, after: int, wait: int) -> list[dict[str, Any]]:
        deadline = time.monotonic() + wait
        with self.lock:
            while True:
                found = [c for c in self.commands if c["id"] > after]
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                self.lock.wait(left)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        body = json.loads(raw) if raw else None
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        status, answer = self.fake.handle(
            method,
            url.path.removeprefix(PREFIX),
            query,
            self.headers.get("Authorization", ""),
            body,
            encoding,
        )
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")


def wait_for(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll check until it returns something truthy; fail the test after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
