"""The shipped web server (gunicorn with config/gunicorn.py serving config.asgi) in a process of its own,
against the test database, on a free loopback port."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.workers import ROOT, database_url

METRICS_TOKEN = "asgi-test-metrics"


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def request(
        self, method: str, path: str, token: str = "", body: Any = None, timeout: float = 30
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        raw = None if body is None else json.dumps(body).encode()
        if raw is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=raw, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data.decode(errors="replace")

    def metric(self, name: str) -> float:
        status, text = self.request("GET", "/metrics", METRICS_TOKEN)
        assert status == 200, text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(log: Path, **env: str) -> Server:
    """One worker unless GUNICORN_WORKERS says otherwise; `env` overrides (REDIS_URL="" for no Redis)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    full = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL or "",
        "SECRET_KEY": "asgi-test-only",
        "DEBUG": "0",
        "TLS": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        "METRICS_TOKEN": METRICS_TOKEN,
        "GUNICORN_WORKERS": "1",
        **env,
    }
    full.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "gunicorn", "-c", "python:config.gunicorn", "config.asgi:application"]
    cmd += ["--bind", f"fd://{sock.fileno()}"]
    with log.open("a") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=full, pass_fds=[sock.fileno()], stdout=out, stderr=subprocess.STDOUT
        )
    sock.close()
    server = Server(proc, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if server.request("GET", "/healthz", timeout=2)[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"the server did not answer within 30 s:\n{log.read_text()[-3000:]}")
