"""Shared by the integration tests: a real Celery worker process on a queue of its own, against the test
database (tests/workers.py starts it; the agent tests start theirs the same way)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers import ROOT, database_url, start_worker, stop_worker

__all__ = ["ROOT", "database_url"]


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Extra environment for the worker (a test overrides this fixture to change the worker's settings)."""
    return {}


@pytest.fixture
def worker_queue(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[str]:
    queue = f"test-{uuid.uuid4().hex[:12]}"
    proc = start_worker(queue, tmp_path / "worker.log", extra_env=worker_env)
    try:
        yield queue
    finally:
        stop_worker(proc)
        print((tmp_path / "worker.log").read_text()[-4000:])
