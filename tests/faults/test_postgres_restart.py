"""PostgreSQL restarted while rounds clear and agents report (issue 19 §Faults).

Real processes throughout: two `gpumarket-agent`s (simulated NVML) running real jobs against the live server,
a Celery worker ticking rounds every 2 s as beat would (a round every 10 s), and the PostgreSQL server the
test database lives on restarted (every connection cut, new ones refused until it is back) just after a tick
that starts a round, while the agents' jobs run and report. Afterwards: every job completed, none lost and none
run twice (no two leases of one job overlapped, one completed lease per job), every lease settled once, every
round finished, ledger_check passing.

It restarts the whole server, so every other session on it is cut too: it runs on a private, throwaway
cluster (issue 29). tests/faults/test_private_postgres.py makes one (initdb in a temporary directory, a free
port) and runs this module in a pytest of its own with DATABASE_URL on it and FAULTS_PG_CTL restarting it;
that test is part of the main run, so `make test` needs no separate step. This test carries the `pg_restart`
marker and runs only when the marker expression names it (tests/conftest.py deselects it otherwise); without
FAULTS_PG_CTL it fails rather than restart the machine's own server. Whatever happens, the test leaves the
server running: if it does not answer afterwards, `$FAULTS_PG_CTL start`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from market.models import (
    EndReason,
    EntryKind,
    Job,
    JobState,
    JournalEntry,
    Lease,
    LeaseState,
    Round,
    RoundState,
    UsageSample,
)
from market.selectors.policy import market_policy
from market.services.leases import settle_key
from tests.integration.conftest import worker_queue  # noqa: F401 - the fixture
from tests.integration.test_agent_e2e import (  # noqa: F401 - fixtures
    cluster,
    ledger_ok,
    submit,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.pg_restart, pytest.mark.django_db(transaction=True)]

TICK_S = 2.0
ROUND_S = 10
JOBS = 4
JOB_SECONDS = 6


def _pg_ctl() -> list[str]:
    configured = os.environ.get("FAULTS_PG_CTL")
    if not configured:
        pytest.fail(
            "FAULTS_PG_CTL is not set: this test restarts its server, so it runs on a private cluster through "
            "tests/faults/test_private_postgres.py (`pytest tests/faults/test_private_postgres.py`), never on "
            "the machine's own server"
        )
    return shlex.split(configured)


def _answers() -> bool:
    import psycopg

    s = connection.settings_dict
    try:
        with psycopg.connect(
            host=s.get("HOST") or "127.0.0.1",
            port=s.get("PORT") or 5432,
            user=s.get("USER") or "postgres",
            dbname="postgres",
            connect_timeout=2,
        ) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


@pytest.fixture
def restart_postgres() -> Iterator[Callable[[], float]]:
    """A function that restarts the server and returns how long it was away; afterwards the server runs."""
    ctl = _pg_ctl()

    def restart() -> float:
        began = time.monotonic()
        done = subprocess.run([*ctl, "restart"], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_until(_answers, "PostgreSQL to answer after its restart", timeout=60)
        # This process's connections died with the server; Django opens new ones on the next query.
        connections.close_all()
        return time.monotonic() - began

    try:
        yield restart
    finally:
        deadline = time.monotonic() + 30
        while not _answers() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _answers():
            subprocess.run([*ctl, "start"], capture_output=True, timeout=120, check=False)
            wait_until(_answers, "PostgreSQL to start again", timeout=60)
        connections.close_all()


class Beat:
    """round_tick sent to the worker's queue every TICK_S, as beat would; tolerant of the server's absence
    (the test process's own reads may fail while PostgreSQL is away, the ticks go through Redis)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.next = 0.0

    def tick(self) -> None:
        from market.tasks import round_tick

        if time.monotonic() >= self.next:
            round_tick.apply_async(queue=self.queue)
            self.next = time.monotonic() + TICK_S


def _settled(job_ids: list[int]) -> bool:
    jobs = Job.objects.filter(pk__in=job_ids)
    return (
        all(j.state == JobState.COMPLETED for j in jobs)
        and not Lease.objects.exclude(state=LeaseState.ENDED).exists()
    )


def test_postgres_restarted_while_rounds_clear_and_agents_report(
    cluster: dict[str, Any],  # noqa: F811 - the fixture
    restart_postgres: Callable[[], float],
) -> None:
    policy = market_policy()
    policy.round_seconds = ROUND_S
    policy.save()
    agents = [cluster["agent"](f"node-{x}") for x in "ab"]  # 2 GPUs each: two 2-GPU jobs run at once
    jobs = [submit(cluster, seconds=JOB_SECONDS).pk for _ in range(JOBS)]
    beat = Beat(cluster["queue"])

    def running_and_reporting() -> bool:
        beat.tick()
        return (
            Lease.objects.filter(state=LeaseState.RUNNING).count() == 2
            and UsageSample.objects.filter(at__gte=timezone.now() - timedelta(seconds=3)).exists()
        )

    tails = "\n".join(a.tail() for a in agents)
    wait_until(running_and_reporting, f"two jobs running and reporting\n{tails}", timeout=120)
    # Just after a tick that starts a round (the next slot's), while both jobs run and report.
    time.sleep(ROUND_S - time.time() % ROUND_S + 0.05)
    beat.next = 0.0
    beat.tick()
    time.sleep(0.2)
    away = restart_postgres()
    restarted = timezone.now()

    def finished() -> bool:
        beat.tick()
        later = Round.objects.filter(created_at__gt=restarted, state=RoundState.DISPATCHED).exists()
        return later and _settled(jobs)

    tails = "\n".join(a.tail() for a in agents)
    # Every job completes, and rounds clear after the restart too.
    wait_until(finished, f"every job to complete after the restart\n{tails}", timeout=180)
    assert away < 60

    # Nothing lost, nothing twice.
    assert not Round.objects.exclude(state__in=[RoundState.DISPATCHED, RoundState.FAILED]).exists()
    assert not Round.objects.filter(state=RoundState.FAILED).exists(), list(
        Round.objects.filter(state=RoundState.FAILED).values_list("error", flat=True)
    )
    for job in jobs:
        leases = list(Lease.objects.filter(job_id=job).order_by("started_at"))
        assert [lease.end_reason for lease in leases].count(EndReason.COMPLETED) == 1, leases
        for earlier, later in zip(leases, leases[1:], strict=False):
            assert earlier.ended_at is not None and earlier.ended_at <= later.started_at  # never two at once
    for lease in Lease.objects.all():
        assert lease.charged is not None
        assert JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count() == 1
    ledger_ok()
