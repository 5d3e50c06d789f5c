"""The server's side of the job sandbox (issue 35 part 2): a job's CPUs and memory per GPU, checked and carried
in the bind with the tenant's slug; the agent's capabilities on the node page; "out of memory" on the job page;
a node whose kernel refused the sandbox takes only trusted tenants' jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import AuditEvent
from inventory.models import Node
from market.models import BidOutcome, Command, CommandKind, Job, JobState, LeaseUsage
from market.selectors.policy import market_policy
from market.services import rounds
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, leased, register

pytestmark = pytest.mark.django_db


def page(user: Any, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200, path
    return str(response.content.decode())


CONFINED = {
    "sandbox": "enforced",
    "cgroup": "v2",
    "limits": {"memory": "enforced", "cpu": "enforced", "pids": "cannot enable the pids controller: EBUSY"},
    "tenant_users": "enforced",
    "log_max_bytes": 268435456,
}


@pytest.fixture
def w(world):
    world.fund(world.alpha, 1000)
    world.fund(world.beta, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.save()
    return world


def submit(w: Any, **extra: Any) -> Any:
    body = {
        "name": "train",
        "command": "python train.py",
        "gpus": 2,
        "bids": [{"gpu_type": "H100", "limit": "5"}],
    }
    return w.client(w.alice).post(
        f"/api/v1/tenants/{w.alpha.slug}/jobs", {**body, "max_hours": "1", **extra}, format="json"
    )


def test_cpus_and_memory_per_gpu_are_checked_with_the_field_named(w, settings):
    settings.JOB_CPUS_PER_GPU_MAX = 32
    register(w, "n1")
    for field, bad in [
        ("cpus_per_gpu", 33),
        ("cpus_per_gpu", 0),
        ("cpus_per_gpu", "lots"),
        ("cpus_per_gpu", "1.234"),
        ("memory_gb_per_gpu", -1),
        ("memory_gb_per_gpu", 5000),
        ("memory_gb_per_gpu", True),
    ]:
        response = submit(w, **{field: bad})
        assert response.status_code == 400, (field, bad)
        assert field in str(response.json()), (field, bad, response.json())
    assert not Job.objects.exists()
    response = submit(w, cpus_per_gpu="4.5", memory_gb_per_gpu=96)
    assert response.status_code == 201, response.json()
    assert (response.json()["cpus_per_gpu"], response.json()["memory_gb_per_gpu"]) == ("4.50", "96.00")
    response = submit(w)
    assert response.status_code == 201 and response.json()["cpus_per_gpu"] is None


def test_the_bind_carries_the_tenant_and_the_parts_cpus_and_memory(w, settings):
    settings.JOB_CPUS_PER_GPU_DEFAULT, settings.JOB_MEMORY_GB_PER_GPU_DEFAULT = 6, 32
    register(w, "n1")
    asked = make_job(w.alpha, w.alice, gpus=2, limits={w.h100: 5})
    Job.objects.filter(pk=asked.pk).update(cpus_per_gpu="2.5", memory_gb_per_gpu="10")
    default = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 5})
    rounds.round_tick()
    payloads = {c.payload["job"]: c.payload for c in Command.objects.filter(kind=CommandKind.BIND)}
    first, second = payloads[asked.pk], payloads[default.pk]
    assert (first["tenant"], first["cpus"], first["memory_mb"]) == ("alpha", 5.0, 20 * 1024)
    assert (second["tenant"], second["cpus"], second["memory_mb"]) == ("beta", 6.0, 32 * 1024)
    assert (
        first["pids"] == settings.JOB_PIDS_MAX
        and first["log_max_bytes"] == settings.JOB_LOG_MAX_MB * 1024 * 1024
    )


def test_registration_keeps_the_capabilities_audits_a_change_and_the_console_shows_the_gaps(w):
    agent = register(w, "n1")
    body = {
        "agent_version": "0.2.0",
        "gpus": [
            {"uuid": f"GPU-n1-{i}", "index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
            for i in range(8)
        ],
    }
    assert agent.post("register", {**body, "capabilities": CONFINED}).status_code == 200
    node = Node.objects.get(name="n1")
    assert node.capabilities == CONFINED and node.sandboxed
    assert AuditEvent.objects.filter(action="node.capabilities").count() == 1
    assert agent.post("register", {**body, "capabilities": CONFINED}).status_code == 200
    assert AuditEvent.objects.filter(action="node.capabilities").count() == 1  # unchanged: not audited again
    text = page(w.admin, "/console/nodes/")
    assert "jobs sandboxed" in text and "no pids limit: cannot enable the pids controller: EBUSY" in text
    refused = {**CONFINED, "sandbox": "unavailable: the kernel refused the sandbox: No permissions"}
    assert agent.post("register", {**body, "capabilities": refused}).status_code == 200
    text = page(w.admin, "/console/nodes/")
    assert "no job sandbox (unavailable: the kernel refused the sandbox: No permissions)" in text
    assert agent.post("register", {**body, "capabilities": "x" * 10}).status_code == 400


def test_out_of_memory_is_said_on_the_job_page(w):
    agent = register(w, "n1")
    job = make_job(w.alpha, w.alice, gpus=1, limits={w.h100: 5})
    lease = leased(job)
    agent.post(f"leases/{lease.pk}/started", {})
    response = agent.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 9, "reason": "out of memory", "usage": counters(lease, 60.0)},
    )
    assert response.status_code == 200, response.json()
    assert LeaseUsage.objects.get(lease=lease).exit_reason == "out of memory"
    text = page(w.alice, f"/t/alpha/jobs/{job.pk}/")
    assert "Failed: out of memory: the kernel killed the job at its memory limit" in text
    bad = agent.post(f"leases/{lease.pk}/exited", {"exit_code": 1, "reason": "bored"})
    assert bad.status_code == 400 and "reason" in str(bad.json())


def test_a_node_whose_kernel_refused_the_sandbox_takes_only_trusted_tenants_jobs(w):
    agent = register(w, "n1")
    refused = {"sandbox": "unavailable: the kernel refused the sandbox", "limits": {}}
    body = {
        "gpus": [
            {"uuid": f"GPU-n1-{i}", "index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
            for i in range(8)
        ]
    }
    assert agent.post("register", {**body, "capabilities": refused}).status_code == 200
    untrusted = make_job(w.alpha, w.alice, gpus=1, limits={w.h100: 5})
    period = timedelta(seconds=market_policy().round_seconds)
    rounds.round_tick(now=timezone.now())
    untrusted.refresh_from_db()
    assert untrusted.state == JobState.PENDING  # not offered: no trusted tenant bids
    w.beta.trusted = True
    w.beta.save()
    trusted = make_job(w.beta, w.bob, gpus=1, limits={w.h100: 4})
    rounds.round_tick(now=timezone.now() + period)
    trusted.refresh_from_db()
    untrusted.refresh_from_db()
    assert trusted.state == JobState.ALLOCATED
    assert untrusted.state == JobState.PENDING
    skipped = (
        BidOutcome.objects.filter(job=untrusted).order_by("-pk").values_list("reason", flat=True).first()
    )
    assert skipped == "node_without_sandbox"


def test_the_agents_drains_and_kills_between_tenants_are_audited_and_the_reason_shown(w):
    agent = register(w, "n1")
    events = [
        {
            "kind": "gpu_drained",
            "gpu": "GPU-n1-0",
            "detail": "before beta's job (after alpha's): XID 79 error",
            "at": 1.0,
        },
        {
            "kind": "foreign_killed",
            "gpu": "GPU-n1-1",
            "pid": 4242,
            "detail": "held by no lease, killed after 60 s",
        },
    ]
    gpus = [{"uuid": "GPU-n1-0", "healthy": False, "error": "drained: XID 79 error"}]
    response = agent.heartbeat(gpus=gpus, events=events)
    assert response.status_code == 200, response.json()
    drained = AuditEvent.objects.get(action="node.gpu_drained")
    assert drained.detail["gpu"] == "GPU-n1-0" and "XID 79" in drained.detail["detail"]
    assert AuditEvent.objects.get(action="node.foreign_killed").detail["pid"] == 4242
    assert "drained: XID 79 error" in page(w.admin, "/console/nodes/")
    bad = agent.heartbeat(events=[{"kind": "reboot_node", "gpu": "GPU-n1-0"}])
    assert bad.status_code == 400 and "events" in str(bad.json())
