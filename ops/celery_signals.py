"""Celery signal handlers: request ids travel with tasks, each task gets log ids and a counted outcome, and a
worker can serve its own /metrics (CELERY_METRICS_PORT) when it runs on a machine without the web server."""

from __future__ import annotations

import logging
import os
from contextvars import Token
from typing import Any

from celery.signals import before_task_publish, task_postrun, task_prerun, worker_ready

from config import logs, metrics

log = logging.getLogger("gpumarket.tasks")
_HEADER = "gpumarket_request_id"
_bound: dict[str, Token[dict[str, Any] | None]] = {}


@before_task_publish.connect
def _send_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = logs.current_ids().get("request_id")
    if headers is not None and request_id:
        headers[_HEADER] = request_id


@task_prerun.connect
def _bind_ids(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    request_id = getattr(getattr(task, "request", None), _HEADER, None)
    if task_id:
        _bound[task_id] = logs.push(task_id=task_id, request_id=request_id)


@task_postrun.connect
def _count(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    name = getattr(task, "name", "unknown")
    metrics.celery_task(task=name, outcome=(state or "unknown").lower())
    token = _bound.pop(task_id or "", None)
    if token is not None:
        logs.pop(token)


@worker_ready.connect
def _serve_metrics(**_: Any) -> None:
    port = os.environ.get("CELERY_METRICS_PORT")
    if not port:
        return
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server

    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    start_http_server(int(port), addr=os.environ.get("CELERY_METRICS_ADDR", "127.0.0.1"), registry=registry)
    log.info("worker metrics on port %s", port)
