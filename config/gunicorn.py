"""gunicorn settings for production (`gunicorn -c python:config.gunicorn config.asgi`), from the environment.

ASGI workers (uvicorn's, from the uvicorn-worker package): each is one process with an event loop. The
agents' command long poll is a coroutine there and holds no worker while it waits; every other view is sync
and runs on a thread of its own per request (Django's ASGI handler), so the rest of the API is neither
queued behind the polls nor serialised on one thread. docs/deploy.md §Web machines explains the choice
and §Fleet traffic the figures behind it.

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
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "uvicorn_worker.UvicornWorker")
# Waiting polls cost no worker, so workers only need to cover the CPUs: one per core, and at least two so
# a worker restarting (a crash, a reload) never leaves the machine without one. More would only add
# processes contending for the same cores (and database pools: DB_POOL_SIZE each).
workers = int(os.environ.get("GUNICORN_WORKERS", str(max(2, multiprocessing.cpu_count()))))
# With async workers the timeout is how long a worker's event loop may go without telling the master it is
# alive, not how long a request may take: a long poll (up to AGENT_POLL_SECONDS, 240 s) does not count against it.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 30
# An idle keep-alive connection stays open this long: longer than nginx keeps an idle upstream connection
# (keepalive_timeout, 60 s), so nginx never sends a request down a connection the worker is closing.
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "75"))
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
