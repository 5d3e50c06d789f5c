"""Two Celery worker processes and one beat, on Redis and PostgreSQL, clear a stream of rounds while jobs are
submitted over the API; /readyz names the workers once they stop.

Each worker and the beat are real subprocesses pointed at the test database, with a queue of their own
(CELERY_QUEUE), so nothing else on this Redis takes their tasks. Rounds are 2 s apart (the policy row set
directly: the API's floor of 10 s is for people), beat ticks every second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import Count
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from market.models import (
    DONE_STATES,
    LIVE_LEASE_STATES,
    BidOutcome,
    Guarantee,
    Lease,
    MarketPolicy,
    Round,
    RoundState,
)
from ops.models import WorkerHeartbeat
from tests.integration.conftest import ROOT
from tests.integration.conftest import database_url as _database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

ROUND_S = 2
ROUNDS = 5
# Beat sends heartbeats with this expiry: on a loaded machine a shorter one expires in the queue.
HEARTBEAT_S = 2


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", *args],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        queue = f"test-{uuid.uuid4().hex[:12]}"
        self.env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "REDIS_URL": settings.CELERY_BROKER_URL,
            "CELERY_QUEUE": queue,
            "ROUND_TICK_SECONDS": "1",
            "WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_S),
        }
        self.workers = [
            _start(
                [
                    "worker",
                    "--pool",
                    "solo",
                    "-n",
                    f"w{i}-{queue}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "-l",
                    "info",
                ],
                self.env,
                tmp_path / f"worker{i}.log",
            )
            for i in (1, 2)
        ]
        self.beat: subprocess.Popen[bytes] | None = None

    def wait_ready(self, timeout: float = 90) -> None:
        """Until both workers logged `ready` (Django set up, the allocator's kernels loaded)."""
        logs = [self.tmp / f"worker{i}.log" for i in (1, 2)]
        _wait(lambda: all(" ready." in log.read_text() for log in logs), timeout, "the workers to start")

    def start_beat(self) -> None:
        schedule = self.tmp / "celerybeat-schedule"
        self.beat = _start(["beat", "-s", str(schedule), "-l", "info"], self.env, self.tmp / "beat.log")

    def stop_beat(self) -> None:
        if self.beat is not None:
            _stop(self.beat)

    def stop_workers(self) -> None:
        for proc in self.workers:
            _stop(proc)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp.glob("*.log")))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    try:
        yield running
    finally:
        running.stop_beat()
        running.stop_workers()
        print(running.logs())


def _wait(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _submit(client: APIClient, slug: str, n: int) -> int:
    body = {
        "name": f"{slug}-{n}",
        "command": "python train.py",
        "gpus": 1 + n % 3,
        "max_hours": "1",
        "bids": [{"gpu_type": "H100", "limit": str(2 + n % 5)}, {"gpu_type": "A100", "limit": "1.5"}],
    }
    response = client.post(f"/api/v1/tenants/{slug}/jobs", body, format="json", HTTP_IDEMPOTENCY_KEY=f"k{n}")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def test_two_workers_and_a_beat_clear_a_stream_of_rounds(world, cluster, settings) -> None:
    settings.WORKER_HEARTBEAT_SECONDS = HEARTBEAT_S
    settings.ROUND_TICK_SECONDS = 1
    settings.METRICS_TOKEN = "cluster-metrics-token"
    MarketPolicy.objects.update_or_create(
        singleton=1, defaults={"round_seconds": ROUND_S, "min_runtime_s": 0}
    )
    world.nodes(world.h100, 2, size=8)
    world.nodes(world.a100, 1, size=4)
    Guarantee.objects.create(tenant=world.gamma, gpu_type=world.h100, gpus=4)  # reclaim: preemptions happen
    tenants = [(world.alpha, world.alice), (world.beta, world.bob), (world.gamma, world.carl)]
    clients = []
    for tenant, user in tenants:
        world.fund(tenant, 10_000)
        clients.append((tenant.slug, world.client(user, tenant=tenant)))

    cluster.wait_ready()
    cluster.start_beat()
    submitted, n = [], 0
    deadline = time.monotonic() + 60
    while Round.objects.filter(state=RoundState.DISPATCHED).count() < ROUNDS:
        assert time.monotonic() < deadline, f"{ROUNDS} rounds not done in 60 s: {cluster.logs()}"
        slug, client = clients[n % 3]
        submitted.append(_submit(client, slug, n))
        n += 1
        time.sleep(0.3)
    assert Client().get("/readyz").status_code == 200, Client().get("/readyz").json()
    cluster.stop_beat()
    _wait(lambda: not Round.objects.exclude(state__in=DONE_STATES).exists(), 30, "the rounds in flight")

    rounds = list(Round.objects.order_by("slot"))
    states = Counter(r.state for r in rounds)
    assert states[RoundState.FAILED] == 0, [r.error for r in rounds if r.error]
    committed = [r for r in rounds if r.state == RoundState.DISPATCHED and r.committed_at is not None]
    assert len(committed) >= ROUNDS, states
    print(
        f"{len(committed)} rounds, {sum(r.winners for r in committed)} winners, "
        f"{sum(r.preemptions for r in committed)} preemptions, {len(submitted)} jobs submitted"
    )
    # Every round committed exactly once: one summary row, its leases and outcomes written once.
    summaries = Counter(
        AuditEvent.objects.filter(action="round.commit").values_list("detail__round", flat=True)
    )
    assert summaries == Counter({r.pk: 1 for r in committed})
    for r in committed:
        assert Lease.objects.filter(round=r).count() == r.winners
        # A loser's row only when its outcome changed (issue 36): the round counts what it wrote.
        written = BidOutcome.objects.filter(round=r).count()
        assert written == r.counters["outcomes_written"] and r.winners <= written <= r.winners + r.losers
    assert sum(r.winners for r in committed) > 0
    # No job holds two leases.
    doubled = (
        Lease.objects.filter(state__in=LIVE_LEASE_STATES)
        .values("job")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    assert not doubled.exists()
    assert Lease.objects.values("job", "round").annotate(n=Count("pk")).filter(n__gt=1).count() == 0
    # Both workers took work, and the books balance.
    for log in ("worker1.log", "worker2.log"):
        assert "succeeded in" in (cluster.tmp / log).read_text(), f"{log} ran no task"
    assert WorkerHeartbeat.objects.exists()
    call_command("ledger_check", stdout=StringIO())
    call_command("orphan_check", stdout=StringIO())  # no lease, GPU, command or outcome points at nothing

    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer cluster-metrics-token").content.decode()
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert values["gpumarket_rounds_total", (("outcome", "committed"),)] == len(committed)
    assert values["gpumarket_round_duration_seconds_count", ()] == len(committed)

    cluster.stop_workers()
    time.sleep(3 * HEARTBEAT_S + 0.5)  # three heartbeat intervals
    ready = Client().get("/readyz")
    assert ready.status_code == 503 and "worker" in ready.json()["failing"], ready.json()
