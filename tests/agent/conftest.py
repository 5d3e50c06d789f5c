"""Fixtures for the agent's tests: the fake server, and the agent as a real process (`python -m nodeagent.agent`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakeserver import BOOTSTRAP, FakeServer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.start()
    yield fake
    if fake._httpd is not None:
        fake.stop()


class AgentProcess:
    """One agent process on a state directory; start() again after stop()/kill() restarts it there."""

    def __init__(self, server: FakeServer, tmp: Path, **flags: Any) -> None:
        self.server, self.tmp = server, tmp
        self.state_dir = tmp / "state"
        self.flags = {"backend": "sim", "sim-gpus": 2, "interval": 0.2, "name": "node-a", **flags}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.tmp.glob("agent-*.log")))

    def start(self) -> AgentProcess:
        self.starts += 1
        args = [
            sys.executable,
            "-m",
            "nodeagent.agent",
            "--server",
            self.server.url,
            "--state-dir",
            str(self.state_dir),
        ]
        for key, value in self.flags.items():
            args += [f"--{key}", str(value)]
        env = {**os.environ, "GPUMARKET_BOOTSTRAP_TOKEN": BOOTSTRAP, "PYTHONPATH": str(REPO)}
        with open(self.tmp / f"agent-{self.starts}.log", "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        return self

    def terminate(self, timeout: float = 15) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def job_log(self, lease: int) -> str:
        path = self.state_dir / "logs" / f"{lease}.log"
        return path.read_text() if path.exists() else ""

    def job(self, lease: int) -> dict[str, Any]:
        for sub in ("jobs", "jobs/done"):
            path = self.state_dir / sub / f"{lease}.json"
            if path.exists():
                return dict(json.loads(path.read_text()))
        raise AssertionError(f"no record for lease {lease}")


@pytest.fixture
def agent(server: FakeServer, tmp_path: Path) -> Iterator[AgentProcess]:
    handle = AgentProcess(server, tmp_path)
    yield handle
    if handle.proc is not None and handle.proc.poll() is None:
        handle.kill()
    _kill_leftover_jobs(handle.state_dir)


def _kill_leftover_jobs(state_dir: Path) -> None:
    """Jobs outlive their agent by design; a test must not leave them behind."""
    for path in (state_dir / "jobs").glob("*.json"):
        pid = json.loads(path.read_text()).get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
