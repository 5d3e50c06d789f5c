"""Multiprocess mode: what two separate processes (two gunicorn workers) counted, one /metrics adds up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import ROOT, database_url

pytestmark = pytest.mark.django_db(transaction=True)

SETUP = "import django; django.setup(); "
WORKER = (
    SETUP
    + "from config import metrics; metrics.http_request(route='job-list', method='POST', status=201, seconds=0.02)"
)
SCRAPE = SETUP + (
    "from django.test import Client; "
    "import sys; sys.stdout.write(Client().get('/metrics', HTTP_AUTHORIZATION='Bearer mp-token').content.decode())"
)


def _run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_two_processes_counts_add_up_in_one_scrape(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "METRICS_TOKEN": "mp-token",
        "ALLOWED_HOSTS": "testserver",
        "LOG_LEVEL": "WARNING",
    }
    _run(WORKER, env)
    _run(WORKER, env)
    body = _run(SCRAPE, env)
    assert 'gpumarket_http_requests_total{method="POST",route="job-list",status="201"} 2.0' in body
    assert 'gpumarket_http_request_duration_seconds_count{method="POST",route="job-list"} 2.0' in body
    assert "gpumarket_rounds_total" in body  # the market series come along
