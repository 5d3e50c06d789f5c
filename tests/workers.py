"""Real Celery worker processes for the integration and fault tests, each on a queue of its own (so nothing
else on the shared Redis takes its tasks), pointed at the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
WORKER_ARGS = ["--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"]


def database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def start_worker(
    queue: str, log: Path, *, kill_point: str | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[Any]:
    """A worker on `queue`; with kill_point, one that SIGKILLs itself there (tests/faults/killer.py)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.CELERY_BROKER_URL,
        **(extra_env or {}),
    }
    if kill_point is None:
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue, *WORKER_ARGS]
    else:
        cmd = [sys.executable, "-m", "tests.faults.killer", kill_point, "-Q", queue, *WORKER_ARGS]
    out = log.open("a")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_worker(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {seconds:.0f} s")
