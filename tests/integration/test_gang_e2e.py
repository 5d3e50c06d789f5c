"""A gang on two nodes end to end: a live server, a real Celery worker and two real `gpumarket-agent`
processes (simulated NVML) on loopback with different node addresses, 127.0.0.2 and 127.0.0.3.

The job is the standard-library demo (`python -m nodeagent.agent.demo_dist`): the two parts meet at the
rendezvous the bind gave them (rank 0's node address, the lease's port) and all-reduce their ranks. Checked:
every part computed the same sum and the lease settled once for both parts; and, with the parts held
running, killing one part's process ends the other and the job fails naming the part.
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
    EndReason,
    EntryKind,
    Job,
    JobState,
    JournalEntry,
    Lease,
    LeasePart,
    LeaseState,
    LeaseUsage,
    Round,
)
from market.selectors.usage import charge_for
from market.services.leases import settle_key
from nodeagent.services.registration import bootstrap_token_create
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

GPUS = 2  # per node; the job takes both nodes whole
ADDRESSES = {"node-a": "127.0.0.2", "node-b": "127.0.0.3"}


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class GangAgent:
    """One gpumarket-agent for one node, registering the node's own loopback address."""

    def __init__(self, tmp: Path, server: str, token: str, name: str) -> None:
        self.state, self.name = tmp / f"state-{name}", name
        self.log = tmp / f"agent-{name}.log"
        token_file = tmp / f"token-{name}"
        token_file.write_text(token)
        command = [
            *(sys.executable, "-m", "nodeagent.agent", "--server", server),
            *("--bootstrap-token-file", str(token_file), "--state-dir", str(self.state)),
            *("--backend", "sim", "--sim-gpus", str(GPUS), "--sim-model", "NVIDIA H100 80GB HBM3"),
            *("--interval", "0.5", "--checkpoint-root", str(tmp / "checkpoints")),
            *("--name", name, "--address", ADDRESSES[name]),
        ]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=self.log.open("a"), stderr=subprocess.STDOUT, env={**os.environ}
        )

    def job_pid(self, lease: int) -> int | None:
        """The job's own process: the child of the shim the agent recorded."""
        record = self.state / "jobs" / f"{lease}.json"
        if not record.exists():
            return None
        shim = json.loads(record.read_text())["pid"]
        try:
            children = Path(f"/proc/{shim}/task/{shim}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"AGENT_HEARTBEAT_SECONDS": "1", "AGENT_REPORT_FLOOR_S": "1", "AGENT_REPORT_CEILING_S": "1"}


@pytest.fixture
def gang(world, live_server, worker_queue, settings, tmp_path) -> Iterator[dict[str, Any]]:
    """Alpha funded; node-a and node-b registered by their agents, each with its own address."""
    settings.AGENT_HEARTBEAT_SECONDS = 1
    settings.AGENT_POLL_SECONDS = 2
    settings.AGENT_REPORT_FLOOR_S = settings.AGENT_REPORT_CEILING_S = (
        1  # protocol 2 agents report every second
    )
    world.fund(world.alpha, 1000)
    agents: dict[str, GangAgent] = {}
    try:
        for name in ADDRESSES:  # one after the other: node-a gets the lower id, so rank 0
            token = bootstrap_token_create(actor=world.admin, name=name).secret
            agents[name] = GangAgent(tmp_path, live_server.url, token, name)
            registered = Node.objects.filter(name=name)
            wait_until(registered.exists, f"{name} to register")
        yield {"world": world, "agents": agents, "queue": worker_queue}
    finally:
        for agent in agents.values():
            agent.stop()
            print(f"--- agent {agent.name}\n{agent.tail()}")


def submit(gang: dict[str, Any], command: str) -> Job:
    w = gang["world"]
    body = {
        "name": "allreduce",
        "command": command,
        "gpus": 2 * GPUS,
        "max_hours": "1",
        "grace_seconds": 3,
        "bids": [{"gpu_type": "H100", "limit": "5"}],
    }
    response = w.client(w.alice).post("/api/v1/tenants/alpha/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def run_round(gang: dict[str, Any]) -> None:
    from market.tasks import round_advance

    rnd = Round.objects.create(slot=timezone.now() + timedelta(seconds=300), period_s=300)
    round_advance.apply_async(args=(rnd.pk,), queue=gang["queue"])
    wait_until(lambda: Round.objects.get(pk=rnd.pk).state in ("dispatched", "failed"), "the round")
    rnd.refresh_from_db()
    assert rnd.state == "dispatched", rnd.error


def tails(lease: Lease) -> dict[str, str]:
    return dict(LeaseUsage.objects.filter(lease=lease).values_list("node__name", "log_tail"))


def logs(gang: dict[str, Any]) -> str:
    return "\n".join(f"--- {a.name}\n{a.tail()}" for a in gang["agents"].values())


def test_two_parts_meet_at_the_rendezvous_and_compute_the_same_sum(gang):
    job = submit(gang, f"{sys.executable} -m nodeagent.agent.demo_dist --timeout 40")
    run_round(gang)
    lease = Lease.objects.get(job=job)
    assert Node.objects.get(name="node-a").address == "127.0.0.2"
    wait_until(
        lambda: Lease.objects.get(pk=lease.pk).state == LeaseState.ENDED, f"the gang to end\n{logs(gang)}"
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (job.state, lease.end_reason) == (JobState.COMPLETED, EndReason.COMPLETED), (
        lease.end_detail,
        tails(lease),
    )
    seen = tails(lease)
    port = lease.commands.get(kind="bind", node__name="node-b").payload["gang"]["rdzv_port"]
    assert f"rank 0 of 2 on 127.0.0.2: rendezvous 127.0.0.2:{port}" in seen["node-a"]
    assert f"rank 1 of 2 on 127.0.0.3: rendezvous 127.0.0.2:{port}" in seen["node-b"]
    assert "rank 0: rank 1 arrived from 127.0.0.3" in seen["node-a"]
    for name, text in seen.items():  # every part computed the same sum: 0 + 1
        assert "allreduce sum of ranks = 1 ok" in text, (name, text)
    parts = list(
        LeasePart.objects.filter(lease=lease).order_by("rank").values_list("rank", "state", "exit_code")
    )
    assert parts == [(0, "exited", 0), (1, "exited", 0)]
    assert JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count() == 1
    measured = sum(LeaseUsage.objects.filter(lease=lease).values_list("gpu_seconds", flat=True))
    assert (
        lease.charged
        == charge_for(gpu_seconds=measured, energy_j=0, price=lease.price, energy_price_kwh=0)
        > 0
    )
    call_command("ledger_check", stdout=StringIO())


def test_killing_one_part_ends_the_other_and_the_job_fails_naming_the_part(gang):
    job = submit(gang, f"{sys.executable} -m nodeagent.agent.demo_dist --timeout 40 --hold 300")
    run_round(gang)
    lease = Lease.objects.get(job=job)
    wait_until(
        lambda: Lease.objects.get(pk=lease.pk).state == LeaseState.RUNNING,
        f"every part to start\n{logs(gang)}",
    )
    wait_until(
        lambda: (
            all("allreduce sum of ranks = 1 ok" in t for t in tails(lease).values())
            and len(tails(lease)) == 2
        ),
        f"both parts to report their sum\n{logs(gang)}",
    )
    pid = wait_until(lambda: gang["agents"]["node-b"].job_pid(lease.pk), "part 1's process")
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: Lease.objects.get(pk=lease.pk).state == LeaseState.ENDED, f"the gang to end\n{logs(gang)}"
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (job.state, lease.end_reason) == (JobState.FAILED, EndReason.FAILED)
    assert lease.end_detail == "part 1 on node node-b was killed by signal 9"
    parts = dict(LeasePart.objects.filter(lease=lease).values_list("rank", "signal"))
    assert parts == {0: signal.SIGTERM, 1: signal.SIGKILL}  # part 0 was released, not left running
    assert gang["agents"]["node-a"].job_pid(lease.pk) is None
    detail = gang["world"].client(gang["world"].alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    shown = detail["leases"][0]
    assert [(p["node"], p["state"]) for p in shown["parts"]] == [("node-a", "exited"), ("node-b", "exited")]
    assert "allreduce sum of ranks = 1 ok" in shown["parts"][1]["log_tail"]
    assert JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count() == 1
    call_command("ledger_check", stdout=StringIO())
