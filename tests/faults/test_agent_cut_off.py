"""An agent cut off from the server past its lease's expiry (issue 19 §Faults), with real processes: a live
server, a Celery worker, a `gpumarket-agent` (simulated NVML) talking through a proxy the test switches off,
and a real job that would run far longer than the lease allows.

While cut off, the agent enforces the lease's `max_seconds` on its own (SIGTERM, grace, SIGKILL) and spools
its reports; the server's tick asks for the stop it cannot deliver. Once the agent is back, its exit report
(stopped_by "expiry") and spooled usage settle the lease once, `expired`, charged what was measured up to the
expiry; the job never ran twice and the ledger checks.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest

from market.models import EndReason, Job, JobState, Lease, LeaseState, LeaseUsage
from tests.integration.conftest import worker_queue  # noqa: F401 - the fixture
from tests.integration.test_agent_e2e import (  # noqa: F401 - fixtures
    GPUS,
    JOB,
    PRICE_CREDITS,
    cluster,
    env_of,
    lease_in,
    ledger_ok,
    measured_charge,
    run_round,
    settled_once,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MAX_HOURS = "0.017"  # 61.2 s: just over the shortest lease a job may ask for (1 minute)
GRACE_S = 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_agent_cut_off_past_its_leases_expiry_stops_the_job_and_settles_it_on_return(
    cluster: dict[str, Any],  # noqa: F811 - the fixture
) -> None:
    from market.tasks import round_tick

    w = cluster["world"]
    agent = cluster["agent"](proxied=True)
    proxy = cluster["proxies"][0]
    body = {
        "name": "too long",
        "command": f"{sys.executable} {JOB} 600",
        "gpus": GPUS,
        "max_hours": MAX_HOURS,
        "grace_seconds": GRACE_S,
        "bids": [{"gpu_type": "H100", "limit": str(PRICE_CREDITS)}],
    }
    response = w.client(w.alice).post("/api/v1/tenants/alpha/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    run_round(cluster)
    lease = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{agent.tail()}")
    pid = env_of(cluster, job, lease)["pid"]
    wait_until(lambda: LeaseUsage.objects.filter(lease=lease, gpu_seconds__gt=0).exists(), "usage")

    proxy.set_up(False)  # the agent can no longer reach the server
    expiry = lease.started_at.timestamp() + lease.max_seconds
    time.sleep(max(0.0, expiry - time.time()) + 1)
    round_tick.apply_async(
        queue=cluster["queue"]
    )  # beat's tick: the server asks for a stop it cannot deliver
    wait_until(lambda: Lease.objects.get(pk=lease.pk).state == LeaseState.STOPPING, "the server's stop")
    # The agent, still cut off, ends the job itself: SIGTERM at the expiry, SIGKILL after the grace period.
    wait_until(lambda: not _alive(pid), f"the agent to stop the job on its own\n{agent.tail()}", timeout=30)
    assert Lease.objects.get(pk=lease.pk).state == LeaseState.STOPPING  # nothing settled without a report

    proxy.set_up(True)
    wait_until(lambda: lease_in(job, LeaseState.ENDED), f"the lease to settle\n{agent.tail()}", timeout=90)
    lease.refresh_from_db()
    job.refresh_from_db()
    assert lease.end_reason == EndReason.EXPIRED and job.state == JobState.EXPIRED
    usage = LeaseUsage.objects.get(lease=lease)
    # Measured up to the expiry (plus the grace period), not to the reconnection ~several seconds later.
    assert GPUS * (lease.max_seconds - 10) <= usage.gpu_seconds <= GPUS * (lease.max_seconds + GRACE_S + 5)
    assert lease.charged == measured_charge(lease) > 0
    assert Lease.objects.filter(job=job).count() == 1  # never bound twice
    settled_once(lease)
    ledger_ok()
