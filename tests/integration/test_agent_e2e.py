"""The node agent end to end: a live server, a real Celery worker and real `gpumarket-agent` processes
(simulated NVML backend), with jobs that really run (tests/integration/e2e_job.py).

Each test registers a node through its agent with a bootstrap token, submits over the API, lets the worker
clear a round, and watches the job run and the lease settle for what the agent measured; then checks the
ledger. The faults: the agent SIGKILLed mid-job and restarted, the server unreachable for a while (the agent
talks through a proxy the test switches off), a node that never returns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from inventory.models import Node
from market.models import (
    CommandKind,
    EndReason,
    EntryKind,
    Hold,
    Job,
    JobState,
    JournalEntry,
    Lease,
    LeaseState,
    LeaseUsage,
    Round,
    UsageSample,
)
from market.models.usage_blob import unpack
from market.selectors.usage import charge_for
from market.services.leases import lease_request_stop, settle_key
from nodeagent.services.registration import bootstrap_token_create
from tests.integration.conftest import ROOT
from tests.integration.proxy import Proxy

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

JOB = ROOT / "tests" / "integration" / "e2e_job.py"
GPUS = 2
PRICE_CREDITS = 5


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Agent:
    """One gpumarket-agent process for one node, restartable on its state directory."""

    def __init__(self, tmp: Path, server: str, token: str, name: str) -> None:
        self.state = tmp / f"state-{name}"
        self.checkpoints = tmp / "checkpoints"
        self.server, self.token, self.name = server, token, name
        self.log = tmp / f"agent-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        token_file = self.state.parent / f"token-{self.name}"
        token_file.write_text(self.token)
        command = [
            sys.executable,
            "-m",
            "nodeagent.agent",
            "--server",
            self.server,
            "--bootstrap-token-file",
            str(token_file),
            "--state-dir",
            str(self.state),
            "--backend",
            "sim",
            "--sim-gpus",
            str(GPUS),
            "--sim-model",
            "NVIDIA H100 80GB HBM3",
            "--interval",
            "0.5",
            "--checkpoint-root",
            str(self.checkpoints),
            "--name",
            self.name,
        ]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=self.log.open("a"), stderr=subprocess.STDOUT, env={**os.environ}
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {
        "NODE_DOWN_SECONDS": "3",
        "AGENT_HEARTBEAT_SECONDS": "1",
        "AGENT_REPORT_FLOOR_S": "1",
        "AGENT_REPORT_CEILING_S": "1",
    }


@pytest.fixture
def cluster(world, live_server, worker_queue, settings, tmp_path) -> Iterator[dict[str, Any]]:
    """Alpha funded, a worker on its own queue, and a function that starts an agent for a new node."""
    settings.AGENT_HEARTBEAT_SECONDS = 1
    settings.AGENT_POLL_SECONDS = 2
    settings.AGENT_REPORT_FLOOR_S = settings.AGENT_REPORT_CEILING_S = (
        1  # protocol 2 agents report every second
    )
    world.fund(world.alpha, 1000)
    agents: list[Agent] = []
    proxies: list[Proxy] = []

    def agent(name: str = "node-a", *, proxied: bool = False) -> Agent:
        server = live_server.url
        if proxied:
            host, port = live_server.url.rsplit("//", 1)[1].split(":")
            proxies.append(Proxy(host, int(port)))
            server = proxies[-1].url
        token = bootstrap_token_create(actor=world.admin, name=name).secret
        started = Agent(tmp_path, server, token, name)
        started.start()
        agents.append(started)
        wait_until(lambda: Node.objects.filter(name=name).exists(), f"{name} to register\n{started.tail()}")
        return started

    try:
        yield {
            "world": world,
            "agent": agent,
            "queue": worker_queue,
            "proxies": proxies,
            "tmp": tmp_path,
            "live_url": live_server.url,
        }
    finally:
        for a in agents:
            a.stop()
            print(f"--- agent {a.name}\n{a.tail()}")
        for p in proxies:
            p.close()


def submit(cluster: dict[str, Any], seconds: float, *, grace: int = 2) -> Job:
    w = cluster["world"]
    body = {
        "name": "e2e",
        "command": f"{sys.executable} {JOB} {seconds}",
        "gpus": GPUS,
        "max_hours": "1",
        "grace_seconds": grace,
        "bids": [{"gpu_type": "H100", "limit": str(PRICE_CREDITS)}],
    }
    response = w.client(w.alice).post("/api/v1/tenants/alpha/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def run_round(cluster: dict[str, Any]) -> None:
    """A round cleared by the worker: a fresh slot each time, so every call clears."""
    from market.tasks import round_advance

    latest = Round.objects.order_by("-slot").first()
    slot = (latest.slot + timedelta(seconds=300)) if latest else timezone.now()
    rnd = Round.objects.create(slot=slot, period_s=300)
    round_advance.apply_async(args=(rnd.pk,), queue=cluster["queue"])
    wait_until(lambda: Round.objects.get(pk=rnd.pk).state in ("dispatched", "failed"), "the round")
    rnd.refresh_from_db()
    assert rnd.state == "dispatched", rnd.error


def lease_in(job: Job, *states: str) -> Lease | None:
    return Lease.objects.filter(job=job, state__in=states).order_by("-pk").first()


def env_of(cluster: dict[str, Any], job: Job, lease: Lease) -> dict[str, Any]:
    path = wait_until(
        lambda: next(iter(Path(cluster["tmp"], "checkpoints").rglob(f"env-{lease.pk}.json")), None),
        f"the job of lease {lease.pk} to start",
    )
    return dict(json.loads(path.read_text()))


def settled_once(lease: Lease) -> None:
    assert JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count() == 1


def measured_charge(lease: Lease) -> int:
    usage = LeaseUsage.objects.get(lease=lease)
    return min(
        charge_for(
            gpu_seconds=usage.gpu_seconds, energy_j=usage.energy_j, price=lease.price, energy_price_kwh=0
        ),
        Hold.objects.get(key=lease.hold_key).amount,
    )


def ledger_ok() -> None:
    call_command("ledger_check", stdout=StringIO())
    call_command("orphan_check", stdout=StringIO())  # no lease, GPU, command or outcome points at nothing


def test_a_job_runs_on_its_gpus_and_is_charged_what_was_measured(cluster):
    agent = cluster["agent"]()
    job = submit(cluster, seconds=4)
    run_round(cluster)
    lease = wait_until(lambda: lease_in(job, LeaseState.RUNNING, LeaseState.ENDED), "the job to start")
    seen = env_of(cluster, job, lease)
    uuids = [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu").order_by("gpu__index")]
    assert seen["CUDA_VISIBLE_DEVICES"].split(",") == uuids
    assert (seen["GPUMARKET_JOB_ID"], seen["GPUMARKET_LEASE_ID"]) == (str(job.pk), str(lease.pk))
    assert seen["resumed"] is False
    wait_until(lambda: UsageSample.objects.filter(node=lease.node).exists(), "usage to arrive")
    wait_until(lambda: lease_in(job, LeaseState.ENDED), f"the job to end\n{agent.tail()}")
    lease.refresh_from_db()
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and lease.end_reason == EndReason.COMPLETED
    usage = LeaseUsage.objects.get(lease=lease)
    assert GPUS * 3 <= usage.gpu_seconds <= GPUS * 10, usage.gpu_seconds  # about 4 s on 2 GPUs
    assert usage.util_max > 0 and usage.samples > 0 and "done" in usage.log_tail
    assert lease.charged == measured_charge(lease) > 0
    settled_once(lease)
    detail = (
        cluster["world"].client(cluster["world"].alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    )
    assert detail["leases"][0]["usage"]["gpu_seconds"] == usage.gpu_seconds
    ledger_ok()


def test_preemption_checkpoints_in_the_grace_period_and_the_job_resumes(cluster):
    agent = cluster["agent"]()
    job = submit(cluster, seconds=120, grace=2)
    run_round(cluster)
    first = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{agent.tail()}")
    env_of(cluster, job, first)
    wait_until(lambda: LeaseUsage.objects.filter(lease=first, gpu_seconds__gt=0).exists(), "usage")
    stopped = time.monotonic()
    lease_request_stop(
        lease_id=first.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=first.round_id
    )
    wait_until(lambda: lease_in(job, LeaseState.ENDED), f"the preempted job to exit\n{agent.tail()}")
    assert time.monotonic() - stopped >= 2  # it ignored SIGTERM: killed only after its grace period
    first.refresh_from_db()
    job.refresh_from_db()
    assert first.end_reason == EndReason.PREEMPTED and job.state == JobState.PENDING
    ckpt = next(Path(cluster["tmp"], "checkpoints").rglob("checkpoint"))
    assert f"lease {first.pk}" in ckpt.read_text()
    assert not list(Path(cluster["tmp"], "checkpoints").rglob(f"done-{first.pk}"))
    assert first.charged == measured_charge(first)
    # The agent saw the checkpoint file the job wrote on SIGTERM (docs/agent.md §Checkpoints) and the lease
    # keeps its time: after the preemption was asked for, by the file's own clock.
    assert first.last_checkpoint_at is not None and first.stop_requested_at is not None
    assert first.last_checkpoint_at.timestamp() == pytest.approx(ckpt.stat().st_mtime, abs=0.01)
    assert first.last_checkpoint_at >= first.stop_requested_at

    run_round(cluster)
    second = wait_until(lambda: Lease.objects.filter(job=job).exclude(pk=first.pk).first(), "a second lease")
    assert env_of(cluster, job, second)["resumed"] is True
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == JobState.COMPLETED, f"the resumed job\n{agent.tail()}"
    )
    settled_once(first)
    settled_once(second)
    ledger_ok()


def test_an_agent_killed_mid_job_adopts_it_on_restart(cluster):
    agent = cluster["agent"]()
    job = submit(cluster, seconds=10)
    run_round(cluster)
    lease = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{agent.tail()}")
    env_of(cluster, job, lease)
    wait_until(lambda: LeaseUsage.objects.filter(lease=lease, gpu_seconds__gt=2).exists(), "usage")
    agent.kill()
    time.sleep(2)
    agent.start()
    wait_until(lambda: lease_in(job, LeaseState.ENDED), f"the adopted job to end\n{agent.tail()}", timeout=90)
    job.refresh_from_db()
    lease.refresh_from_db()
    assert job.state == JobState.COMPLETED, agent.tail()
    usage = LeaseUsage.objects.get(lease=lease)
    # About 10 s on 2 GPUs: measured across the restart, not lost and not counted twice.
    assert GPUS * 8 <= usage.gpu_seconds <= GPUS * 16, usage.gpu_seconds
    assert UsageSample.objects.filter(node=lease.node).values("boot_epoch").distinct().count() == 2
    assert lease.charged == measured_charge(lease)
    settled_once(lease)
    ledger_ok()


def test_reports_spooled_while_the_server_is_unreachable_arrive_in_order(cluster):
    agent = cluster["agent"](proxied=True)
    proxy = cluster["proxies"][0]
    job = submit(cluster, seconds=10)
    run_round(cluster)
    lease = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{agent.tail()}")
    wait_until(lambda: UsageSample.objects.filter(node=lease.node).exists(), "usage")
    proxy.set_up(False)
    cut = timezone.now()
    time.sleep(5)
    proxy.set_up(True)
    wait_until(lambda: lease_in(job, LeaseState.ENDED), f"the job to end\n{agent.tail()}", timeout=120)
    for epoch in UsageSample.objects.filter(node=lease.node).values_list("boot_epoch", flat=True).distinct():
        seqs = sorted(
            UsageSample.objects.filter(node=lease.node, boot_epoch=epoch).values_list("seq", flat=True)
        )
        assert seqs == list(range(1, len(seqs) + 1))  # none lost
    # Sampled while the server was unreachable (the proxy down from `cut` for 5 s), so delivered after it. A
    # row's `at` is its first tick, and the ticks of the outage may share a report with earlier ones: look at
    # the ticks themselves.
    start, end = cut + timedelta(seconds=1), cut + timedelta(seconds=4)
    during = [
        at + timedelta(milliseconds=int(ms))
        for at, data in UsageSample.objects.filter(node=lease.node, ticks__gt=0).values_list("at", "data")
        for ms in unpack(data).t_ms
    ]
    assert any(start <= t <= end for t in during), (cut, during)
    job.refresh_from_db()
    lease.refresh_from_db()
    assert job.state == JobState.COMPLETED and lease.charged == measured_charge(lease)
    ledger_ok()


def test_a_node_that_never_returns_is_settled_and_its_job_requeued(cluster):
    from nodeagent.tasks import nodes_check

    agent = cluster["agent"]()
    job = submit(cluster, seconds=120)
    run_round(cluster)
    lease = wait_until(lambda: lease_in(job, LeaseState.RUNNING), f"the job to start\n{agent.tail()}")
    pid = env_of(cluster, job, lease)["pid"]
    wait_until(lambda: LeaseUsage.objects.filter(lease=lease, gpu_seconds__gt=1).exists(), "usage")
    agent.kill()
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # the machine is gone, its job with it
    time.sleep(4)  # past NODE_DOWN_SECONDS (3) for the worker
    nodes_check.apply_async(queue=cluster["queue"])
    wait_until(lambda: lease_in(job, LeaseState.ENDED), "the lost node's lease to settle")
    lease.refresh_from_db()
    job.refresh_from_db()
    assert Node.objects.get(pk=lease.node_id).state == Node.State.DOWN
    assert lease.end_reason == EndReason.NODE_LOST and job.state == JobState.PENDING
    assert lease.charged == measured_charge(lease) > 0
    settled_once(lease)
    ledger_ok()
