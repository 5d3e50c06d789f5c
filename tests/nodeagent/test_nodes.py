"""Node liveness and admin: the heartbeat timeout, GPU health in the book, drain and retire, the idle policy."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts.models import AuditEvent
from inventory.models import Node
from market.models import Command, CommandKind, EndReason, JobState, LeaseState, LeaseUsage
from market.selectors.book import book_snapshot
from market.selectors.policy import market_policy
from market.services import rounds
from nodeagent.services.heartbeat import nodes_mark_down
from nodeagent.services.lease_events import leases_release_idle
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, register

pytestmark = pytest.mark.django_db


def _free(node: Node) -> int:
    snap = book_snapshot(round_id=0, now=timezone.now(), policy=market_policy())
    return int(snap.book.nodes.free[list(snap.book.nodes.names).index(node.name)].sum())


def test_a_silent_node_goes_down_its_leases_settled_for_what_was_reported(running):
    _, agent, job, lease = running
    agent.post("usage", agent.report([counters(lease, 300.0)]))
    assert nodes_mark_down(timeout_s=60) == []  # it just registered and reported
    later = timezone.now() + timedelta(seconds=61)
    assert nodes_mark_down(timeout_s=60, now=later) == [agent.node.pk]
    assert nodes_mark_down(timeout_s=60, now=later) == []  # once
    agent.node.refresh_from_db()
    lease.refresh_from_db()
    job.refresh_from_db()
    assert agent.node.state == Node.State.DOWN and _free(agent.node) == 0
    assert (lease.state, lease.end_reason) == (LeaseState.ENDED, EndReason.NODE_LOST)
    assert lease.charged == -(-300 * lease.price // 3600)
    assert job.state == JobState.PENDING
    assert AuditEvent.objects.filter(action="node.down").count() == 1
    call_command("ledger_check", stdout=StringIO())

    # It comes back: up again, and the job it still runs for the settled lease gets a release.
    reply = agent.heartbeat(leases=[lease.pk]).json()
    assert reply["state"] == "up"
    (release,) = [c for c in agent.commands() if c["kind"] == "release"]
    assert release["lease"] == lease.pk
    assert _free(agent.node) == 8


def test_a_bind_for_a_lease_settled_meanwhile_is_not_delivered(running):
    w, agent, _, lease = running
    other = make_job(w.alpha, w.alice, gpus=1, limits={w.h100: 5}, name="second")
    rounds.round_tick(now=timezone.now() + timedelta(seconds=400))
    second = other.leases.get()
    assert any(c["lease"] == second.pk for c in agent.commands())
    nodes_mark_down(timeout_s=60, now=timezone.now() + timedelta(seconds=61))
    assert all(c["lease"] != second.pk or c["kind"] != "bind" for c in agent.commands())


def test_an_unhealthy_gpu_leaves_the_book_until_healthy(running):
    _, agent, _, lease = running
    assert _free(agent.node) == 6
    gpu = "GPU-n1-5"
    agent.heartbeat(gpus=[{"uuid": gpu, "healthy": False, "error": "XID 79: fallen off the bus"}])
    assert _free(agent.node) == 5
    snap = book_snapshot(round_id=0, now=timezone.now(), policy=market_policy())
    assert not snap.book.nodes.free[0][5]
    nodes = call_command_out("node", "list")
    assert "UNHEALTHY XID 79" in nodes
    agent.heartbeat(gpus=[{"uuid": gpu, "healthy": True}])
    assert _free(agent.node) == 6


def call_command_out(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_drain_lets_leases_finish_and_retire_waits_for_them(running):
    w, agent, job, lease = running
    admin = w.client(w.admin)
    name = agent.node.name
    assert w.client(w.alice).post(f"/api/v1/nodes/{name}/drain").status_code == 403
    drained = admin.post(f"/api/v1/nodes/{name}/drain")
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    assert _free(agent.node) == 0
    assert agent.heartbeat().json()["state"] == "draining"
    busy = admin.post(f"/api/v1/nodes/{name}/retire")
    assert busy.status_code == 409 and busy.json()["error"] == "node_busy"
    lease.refresh_from_db()
    assert lease.state == LeaseState.RUNNING  # the running lease goes on
    agent.post(f"leases/{lease.pk}/exited", {"exit_code": 0})
    retired = admin.post(f"/api/v1/nodes/{name}/retire")
    assert retired.status_code == 200 and retired.json()["state"] == "retired"
    assert admin.post(f"/api/v1/nodes/{name}/resume").status_code == 409
    assert agent.heartbeat().json()["state"] == "retired"
    assert nodes_mark_down(timeout_s=60, now=timezone.now() + timedelta(hours=1)) == []
    actions = list(AuditEvent.objects.filter(action__startswith="node.").values_list("action", flat=True))
    assert {"node.drain", "node.retire"} <= set(actions)


def test_a_draining_node_that_went_down_comes_back_draining(running):
    w, agent, *_ = running
    call_command_out("node", "drain", agent.node.name)
    nodes_mark_down(timeout_s=60, now=timezone.now() + timedelta(seconds=61))
    agent.node.refresh_from_db()
    assert agent.node.state == Node.State.DOWN
    assert agent.heartbeat().json()["state"] == "draining"
    call_command_out("node", "resume", agent.node.name)
    agent.node.refresh_from_db()
    assert agent.node.state == Node.State.UP


def test_admin_node_list_and_bootstrap_tokens(running):
    w, agent, *_ = running
    admin = w.client(w.admin)
    listed = admin.get("/api/v1/nodes").json()["results"]
    assert [n["name"] for n in listed] == ["n1"] and len(listed[0]["gpus"]) == 8
    assert listed[0]["last_heartbeat"] is not None and listed[0]["gpus"][0]["healthy"] is True
    assert w.client(w.alice).get("/api/v1/nodes").status_code == 403
    created = admin.post(
        "/api/v1/nodes/bootstrap-tokens", {"name": "n9", "gpu_type": "A100", "ttl_hours": 2}, format="json"
    )
    assert created.status_code == 201 and created.json()["token"].startswith("gpb_")
    assert created.json()["gpu_type"] == "A100"
    taken = admin.post("/api/v1/nodes/bootstrap-tokens", {"name": "n1"}, format="json")
    assert taken.status_code == 400 and "name" in taken.json()["fields"]
    bad = admin.post("/api/v1/nodes/bootstrap-tokens", {"gpu_type": "Z80"}, format="json")
    assert bad.status_code == 400 and "gpu_type" in bad.json()["fields"]
    assert AuditEvent.objects.filter(action="node.bootstrap_token").count() == 2  # n1's and n9's


def test_bootstrap_token_command(world, tmp_path):
    path = tmp_path / "agents" / "n7" / "bootstrap_token"
    call_command_out("node_bootstrap_token", "--name", "n7", "--gpu-type", "H100", "--write", str(path))
    assert path.read_text().startswith("gpb_") and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CommandError, match="unknown GPU type"):
        call_command_out("node_bootstrap_token", "--gpu-type", "Z80")
    with pytest.raises(CommandError, match="no node named"):
        call_command_out("node", "drain", "nope")


def test_idle_policy_releases_an_idle_lease_with_its_reason(running):
    w, agent, job, lease = running
    agent.post("usage", agent.report([counters(lease, 10.0)], util=0))
    assert leases_release_idle() == []  # off by default
    policy = market_policy()
    policy.idle_util_pct, policy.idle_seconds = 5, 60
    policy.save()
    agent.post("usage", agent.report([counters(lease, 20.0)], util=1))
    assert leases_release_idle() == []
    assert leases_release_idle(now=timezone.now() + timedelta(seconds=61)) == [lease.pk]
    assert Command.objects.filter(lease=lease, kind=CommandKind.RELEASE).exists()
    agent.post(f"leases/{lease.pk}/exited", {"exit_code": -15, "stopped_by": "release"})
    detail = w.client(w.alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    assert detail["leases"][0]["end_reason"] == "idle" and detail["state"] == "failed"
    assert LeaseUsage.objects.get(lease=lease).gpu_seconds == 20.0


def test_nodes_made_without_an_agent_never_time_out(world):
    (node,) = world.nodes(world.h100, 1)
    assert nodes_mark_down(timeout_s=60, now=timezone.now() + timedelta(days=1)) == []
    assert Node.objects.get(pk=node.pk).state == Node.State.UP


def test_a_node_drained_between_freeze_and_commit_gets_no_lease(world):
    from market.models import BidOutcome, Round, RoundState

    world.fund(world.alpha, 1000)
    agent = register(world, "n1")
    job = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 5})
    rnd = Round.objects.create(slot=timezone.now(), period_s=300)
    rounds.round_advance(round_id=rnd.pk, stop_after=RoundState.CLEARED)
    call_command_out("node", "drain", agent.node.name)
    done = rounds.round_advance(round_id=rnd.pk)
    assert (done.winners, done.skipped) == (0, 1)
    assert BidOutcome.objects.get(job=job).reason == "gpus_unavailable_during_round"
    assert not job.leases.exists()


def test_a_lease_left_on_a_down_node_is_settled_by_the_next_check(running):
    _, agent, job, lease = running
    Node.objects.filter(pk=agent.node.pk).update(state=Node.State.DOWN)  # as if the commit raced the check
    assert nodes_mark_down(timeout_s=60) == []
    lease.refresh_from_db()
    assert (lease.state, lease.end_reason) == (LeaseState.ENDED, EndReason.NODE_LOST)


def test_a_node_that_registers_while_the_book_is_read_joins_the_next_round(world) -> None:
    """The book reads nodes, then GPUs, in two statements: an agent registering in between (bench/load.py saw
    it as a failed round, KeyError on the new node) must not fail the freeze; its GPUs count from the next book."""
    from django.db import connection

    w = world
    w.nodes(w.h100, 1, size=8)
    joined: list[str] = []

    def register_after_the_node_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not joined and 'FROM "nodeagent_node"' in sql and "ORDER BY" in sql:
            joined.append("late")
            w.nodes(w.h100, 1, size=8, prefix="late-")
        return result

    with connection.execute_wrapper(register_after_the_node_read):
        first = book_snapshot(round_id=0, now=timezone.now(), policy=market_policy()).book
    assert joined == ["late"]
    assert list(first.nodes.names) == ["h100-d0-0"]
    again = book_snapshot(round_id=0, now=timezone.now(), policy=market_policy()).book
    assert sorted(again.nodes.names) == ["h100-d0-0", "late-0"]
    assert int(again.nodes.free.sum()) == 16
