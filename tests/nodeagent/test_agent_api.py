"""The agent API's doors: who may call what, registration, commands and their acknowledgement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import AuditEvent
from inventory.models import Gpu, Node
from market.models import Command, CommandKind, EndReason, JobState, LeaseState, LeaseUsage, UsageReport
from market.selectors.policy import market_policy
from nodeagent.models import BootstrapToken
from nodeagent.services.registration import bootstrap_token_create
from tests.concurrency import run_together
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, gpus_of, leased, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(world):
    world.fund(world.alpha, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.save()
    return world, register(world, "n1"), register(world, "n2")


def _bearer(secret: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def _written() -> tuple[int, ...]:
    return (
        Node.objects.count(),
        Gpu.objects.count(),
        UsageReport.objects.count(),
        LeaseUsage.objects.count(),
        AuditEvent.objects.count(),
        Command.objects.filter(state="acked").count(),
    )


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("post", "heartbeat", {"boot_epoch": 1}),
        ("get", "commands", None),
        (
            "post",
            "usage",
            {"boot_epoch": 1, "seq": 1, "sent_at": "2026-11-24T08:00:00Z", "gpus": [], "leases": []},
        ),
        ("post", "register", {"name": "x", "gpus": gpus_of("x", 1)}),
    ],
)
def test_forged_credential_is_401_and_writes_nothing(two, method, path, body):
    before = _written()
    for secret in ("gpn_forged", "gpb_forged", "gpm_not-an-agent-secret", "nonsense"):
        response = getattr(_bearer(secret), method)(f"/api/v1/agent/{path}", body, format="json")
        assert response.status_code == 401, (secret, response.json())
        assert response.json()["error"] == "authentication_failed"
    assert APIClient().get("/api/v1/agent/commands").status_code == 401
    assert _written() == before


def test_a_tenant_token_is_not_an_agent_secret(two):
    w, n1, _ = two
    response = w.client(w.alice).post("/api/v1/agent/heartbeat", {"boot_epoch": 1}, format="json")
    assert response.status_code == 401
    # ... and a node credential is not a tenant token.
    assert n1.api.get("/api/v1/me").status_code == 401


def test_a_bootstrap_token_only_registers(two):
    w, *_ = two
    secret = bootstrap_token_create(actor=w.admin).secret
    response = _bearer(secret).post("/api/v1/agent/heartbeat", {"boot_epoch": 1}, format="json")
    assert response.status_code == 403


def test_another_nodes_lease_and_command_are_404_and_its_usage_is_dropped(two):
    w, n1, n2 = two
    job = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    lease = leased(job)
    mine, other = (n1, n2) if lease.node_id == n1.node.pk else (n2, n1)
    bind = Command.objects.get(lease=lease, kind=CommandKind.BIND)
    before = _written()
    assert other.post(f"leases/{lease.pk}/started", {}).status_code == 404
    assert other.post(f"leases/{lease.pk}/exited", {"exit_code": 0}).status_code == 404
    assert other.post(f"commands/{bind.pk}/ack", {"result": "applied"}).status_code == 404
    assert other.commands() == []
    # Counters for a lease the node has no GPU of are dropped (the report itself is stored).
    report = other.report([counters(lease, 500.0)])
    assert other.post("usage", report).json() == {"acked": 1}
    assert not LeaseUsage.objects.exists()
    assert _written()[:2] == before[:2] and _written()[3:] == before[3:]
    lease.refresh_from_db()
    assert lease.state == LeaseState.ALLOCATED
    assert [c["id"] for c in mine.commands()] == [bind.pk]


def test_a_bootstrap_token_registers_once(world):
    secret = bootstrap_token_create(actor=world.admin, name="gpu-a").secret
    api = _bearer(secret)
    first = api.post("/api/v1/agent/register", {"gpus": gpus_of("a", 2)}, format="json")
    assert first.status_code == 201 and first.json()["name"] == "gpu-a"
    assert first.json()["credential"].startswith("gpn_")
    before = _written()
    again = api.post("/api/v1/agent/register", {"name": "gpu-b", "gpus": gpus_of("b", 2)}, format="json")
    assert again.status_code == 401
    assert _written() == before
    node = Node.objects.get(name="gpu-a")
    assert (
        node.gpu_type == world.h100
        and node.credential_digest
        and first.json()["credential"] not in str(node.credential_digest)
    )
    assert BootstrapToken.objects.get().node == node


def test_a_refused_registration_leaves_the_token_usable(world):
    secret = bootstrap_token_create(actor=world.admin).secret
    api = _bearer(secret)
    bad = api.post(
        "/api/v1/agent/register", {"name": "x", "gpus": gpus_of("x", 1, "Voodoo 3")}, format="json"
    )
    assert bad.status_code == 400 and "gpus[0].model" in bad.json()["fields"]
    twice = gpus_of("x", 2)
    twice[1]["uuid"] = twice[0]["uuid"]
    bad = api.post("/api/v1/agent/register", {"name": "x", "gpus": twice}, format="json")
    assert bad.status_code == 400 and "gpus[1].uuid" in bad.json()["fields"]
    assert not Node.objects.exists()
    good = api.post(
        "/api/v1/agent/register", {"name": "x", "gpus": gpus_of("x", 1, "A100-SXM4-80GB")}, format="json"
    )
    assert good.status_code == 201 and Node.objects.get().gpu_type == world.a100


def test_an_expired_token_is_refused(world):
    issued = bootstrap_token_create(actor=world.admin)
    BootstrapToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _bearer(issued.secret).post(
        "/api/v1/agent/register", {"name": "x", "gpus": gpus_of("x", 1)}, format="json"
    )
    assert response.status_code == 401 and not Node.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_racing_registrations_with_one_token_register_one_node(world):
    secret = bootstrap_token_create(actor=world.admin).secret

    def attempt(i: int) -> int:
        body = {"name": f"race-{i}", "gpus": gpus_of(f"race-{i}", 1)}
        return int(_bearer(secret).post("/api/v1/agent/register", body, format="json").status_code)

    codes = run_together(attempt, 8)
    assert sorted(codes) == [201] + [401] * 7, codes
    assert Node.objects.count() == 1


def test_registering_again_updates_the_gpus(two):
    w, n1, _ = two
    gpus = gpus_of("n1", 8)
    gpus[7] = {"uuid": "GPU-replacement", "index": 7, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
    response = n1.post("register", {"name": "ignored", "agent_version": "0.2.0", "gpus": gpus})
    assert response.status_code == 200 and "credential" not in response.json()
    rows = {g.uuid: g for g in Gpu.objects.filter(node=n1.node)}
    assert (
        rows["GPU-n1-7"].absent and not rows["GPU-replacement"].absent and rows["GPU-replacement"].index == 7
    )
    n1.node.refresh_from_db()
    assert n1.node.agent_version == "0.2.0" and n1.node.name == "n1"
    # A GPU of another node cannot be claimed.
    gpus[0]["uuid"] = "GPU-n2-0"
    clash = n1.post("register", {"gpus": gpus})
    assert clash.status_code == 409 and clash.json()["error"] == "gpu_registered"


def test_commands_in_order_after_a_cursor_and_acknowledged_once(two):
    w, n1, _ = two
    jobs = [make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5}, name=f"j{i}") for i in range(2)]
    leased(jobs[0])
    binds = list(Command.objects.filter(kind=CommandKind.BIND).order_by("pk"))
    by_node = {c.node_id: c for c in binds}
    agent = n1
    command = by_node[agent.node.pk]
    fetched = agent.commands()
    assert [c["id"] for c in fetched] == [command.pk]
    assert fetched[0]["payload"]["gpus"] == [f"GPU-n1-{i}" for i in range(8)]
    assert fetched[0]["fence"] == command.fence and fetched[0]["kind"] == "bind"
    assert agent.commands(after=command.pk) == []
    assert agent.post(f"commands/{command.pk}/ack", {"result": "applied"}).status_code == 200
    again = agent.post(f"commands/{command.pk}/ack", {"result": "refused", "detail": "late"})
    assert again.status_code == 200
    command.refresh_from_db()
    assert (command.state, command.result) == ("acked", "applied")  # the first answer stands
    assert agent.commands() == []
    bad = agent.post(f"commands/{command.pk}/ack", {"result": "maybe"})
    assert bad.status_code == 400 and "result" in bad.json()["fields"]
    # A wait past the server's poll_seconds (AGENT_POLL_SECONDS) is refused.
    assert agent.get(f"commands?wait={settings.AGENT_POLL_SECONDS + 1}").status_code == 400


def test_a_refused_bind_settles_the_lease_and_requeues_the_job(two):
    w, n1, n2 = two
    job = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 5})
    lease = leased(job)
    agent = n1 if lease.node_id == n1.node.pk else n2
    bind = Command.objects.get(lease=lease)
    response = agent.post(f"commands/{bind.pk}/ack", {"result": "refused", "detail": "expired"})
    assert response.status_code == 200
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.state, lease.end_reason, lease.charged) == (LeaseState.ENDED, EndReason.NODE_LOST, 0)
    assert job.state == JobState.PENDING


def test_long_poll_waits_then_answers_empty(two):
    import time

    _, n1, _ = two
    started = time.monotonic()
    response = n1.get("commands?wait=1")
    assert response.status_code == 200 and response.json() == {"commands": []}
    assert time.monotonic() - started >= 0.9
