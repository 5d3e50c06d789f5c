"""gunicorn settings for production (`gunicorn -c python:config.gunicorn config.wsgi`), from the environment.

With PROMETHEUS_MULTIPROC_DIR set (the systemd unit sets it), every worker writes its metric values there and
/metrics adds them up: the folder is emptied when the master starts, and a worker's live gauges are dropped
when it exits, as prometheus-client's multiprocess mode requires.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Any

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", str(multiprocessing.cpu_count() * 2 + 1)))
# Agents long-poll for commands (up to poll_seconds): stay above it.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
graceful_timeout = 30
# The access line is the application's own (ops.middleware): one per request, with its request id.
accesslog = None
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")


def on_starting(server: Any) -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        Path(folder).mkdir(parents=True, exist_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
