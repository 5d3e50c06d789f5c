"""Series counted in the processes where things happen (web and Celery workers).

prometheus-client picks its storage when it is imported: with `PROMETHEUS_MULTIPROC_DIR` set, each process
writes its values to files in that folder and `/metrics` sums them over every gunicorn worker (and over Celery
workers on the same machine that share the folder); without it (`make run`, tests) they live in this process.
Series that describe the market (rounds, prices, GPUs, money) are read from the database at scrape time
instead (ops.collector), which is right whichever process or machine did the work.

Labels stay bounded: route names, methods, status codes, outcomes, command kinds; never a job, lease or path.
Node names appear only on heartbeat series, one per machine.

They live in config, beside the logs, because every layer records into them (the ASGI entry point, the agent
endpoints, ops' middleware and Celery signals) and config is the one layer all of those may import; the
scrape-time series that read the market stay in ops.collector.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

log = logging.getLogger("gpumarket.ops")

# `_created` series double every counter's lines and no dashboard reads them.
disable_created_metrics()

# Latency buckets from 5 ms to 10 s: API calls, not batch work.
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HTTP_REQUESTS = Counter(
    "gpumarket_http_requests",
    "HTTP requests answered, by URL pattern name, method and status code.",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "gpumarket_http_request_duration_seconds",
    "Time to answer an HTTP request, by URL pattern name and method.",
    ["route", "method"],
    buckets=_HTTP_BUCKETS,
)
USAGE_REPORTS = Counter(
    "gpumarket_agent_usage_reports",
    "Usage reports from node agents by outcome (ingested, duplicate, refused).",
    ["outcome"],
)
USAGE_SAMPLES = Counter(
    "gpumarket_agent_usage_samples",
    "Per-lease, per-GPU usage samples in ingested reports.",
)
# From 1 s (an agent's report answered at once) to an hour: a report comes late when the agent could not
# deliver it (its spool keeps it and sends it later), e.g. while the web servers cannot keep up with the fleet.
_LAG_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
USAGE_LAG = Histogram(
    "gpumarket_agent_usage_lag_seconds",
    "Seconds from an ingested usage report's sent_at (the agent's clock) to the server storing it.",
    buckets=_LAG_BUCKETS,
)
AGENT_COMMANDS = Counter(
    "gpumarket_agent_commands",
    "Outbox commands handed to or acknowledged by node agents, by kind and event (fetched, acked, refused).",
    ["kind", "event"],
)
AGENT_POLLS_WAITING = Gauge(
    "gpumarket_agent_polls_waiting",
    "Agents' command long polls waiting for a command now (over every live web process).",
    multiprocess_mode="livesum",
)
AGENT_REQUESTS_SHED = Counter(
    "gpumarket_agent_requests_shed",
    "Agent requests answered 503 unrun: they waited too long for a worker's slot (config/slots.py).",
)
CELERY_TASKS = Counter(
    "gpumarket_celery_tasks",
    "Celery tasks finished, by task name and outcome (success, failure, retry).",
    ["task", "outcome"],
)
SHADOW_ROUNDS = Counter(
    "gpumarket_shadow_rounds",
    "Shadow rounds (a live round cleared again under a proposed policy version), by outcome (stored, failed).",
    ["outcome"],
)

DB_CONFLICTS = Counter(
    "gpumarket_db_conflicts",
    "Deadlocks and serialization failures met by requests and tasks (config/dbretry.py), by where (request, "
    "task), SQLSTATE (40P01, 40001) and outcome: retried (one more try), recovered (a later try succeeded), "
    "gave_up (the client got a 503, or the task failed).",
    ["where", "sqlstate", "outcome"],
)

USAGE_OUTCOMES = ("ingested", "duplicate", "refused")
COMMAND_EVENTS = ("fetched", "acked", "refused")


def http_request(*, route: str, method: str, status: int, seconds: float) -> None:
    """Called once per request by ops.middleware."""
    method = method if method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS") else "OTHER"
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_DURATION.labels(route, method).observe(seconds)


def usage_reports(
    outcome: str,
    *,
    node: str,
    reports: int = 1,
    samples: int = 0,
    lag_s: float | None = None,
    **ids: object,
) -> None:
    """For the agent server: call once per usage batch it handles (outcome: ingested, duplicate or refused),
    with the batch's node, its report and sample counts, how late it is (received minus sent, for an ingested
    one) and any ids (epoch, seq). Counts it and logs one line."""
    if outcome not in USAGE_OUTCOMES:
        raise ValueError(f"usage outcome {outcome!r}: expected one of {', '.join(USAGE_OUTCOMES)}")
    USAGE_REPORTS.labels(outcome).inc(reports)
    if outcome == "ingested" and samples:
        USAGE_SAMPLES.inc(samples)
    if outcome == "ingested" and lag_s is not None:
        USAGE_LAG.observe(max(0.0, lag_s))  # an agent clock ahead of ours counts as on time
    log.info("usage batch %s", outcome, extra={"node": node, "reports": reports, "samples": samples, **ids})


def agent_command(event: str, *, kind: str, node: str, command_id: int, lease_id: int, **ids: object) -> None:
    """For the agent server: call once per command fetched, acknowledged or refused (a stale fence)."""
    if event not in COMMAND_EVENTS:
        raise ValueError(f"command event {event!r}: expected one of {', '.join(COMMAND_EVENTS)}")
    AGENT_COMMANDS.labels(kind, event).inc()
    log.info(
        "agent command %s %s",
        kind,
        event,
        extra={"node": node, "command_id": command_id, "lease_id": lease_id, **ids},
    )


def agent_request_shed() -> None:
    AGENT_REQUESTS_SHED.inc()


@contextmanager
def agent_poll_waiting() -> Iterator[None]:
    """Around a command poll's wait: counted in gpumarket_agent_polls_waiting while it lasts."""
    AGENT_POLLS_WAITING.inc()
    try:
        yield
    finally:
        AGENT_POLLS_WAITING.dec()


def celery_task(*, task: str, outcome: str) -> None:
    CELERY_TASKS.labels(task, outcome).inc()


def db_conflict(*, where: str, sqlstate: str, outcome: str) -> None:
    DB_CONFLICTS.labels(where, sqlstate, outcome).inc()
