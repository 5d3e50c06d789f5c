"""Protocol 2 (docs/agent.md §Protocol 2): one report carries the heartbeat, acknowledgements, starts,
samples, counters and exits, in a fixed order, in one transaction; gzip bodies; hostile input refused."""

from __future__ import annotations

import gzip
import json
import random
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from inventory.models import Node
from market.models import Command, CommandKind, CommandState, JobState, LeaseState, LeaseUsage
from market.selectors.policy import forget_cached_policy, market_policy
from nodeagent.api.serializers import ReportReplySerializer
from nodeagent.services import pacing
from nodeagent.services.heartbeat import nodes_mark_down
from nodeagent.services.report import AgentReport, report_apply
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, gpus_of, leased, register

pytestmark = pytest.mark.django_db


def _counters(lease: Any, gpu_seconds: float, **extra: Any) -> dict[str, Any]:
    body = counters(lease, gpu_seconds, **extra)
    body.pop("_gpus")
    return body


def _usage(uuids: list[str], lease: int, ticks: int = 2, start: float = 1.7e9) -> dict[str, Any]:
    n = len(uuids)
    return {
        "gpus": uuids,
        "t": [start + 10 * i for i in range(ticks)],
        "util": [[97] * n for _ in range(ticks)],
        "mem_mb": [[30000] * n for _ in range(ticks)],
        "power_w": [[300.5] * n for _ in range(ticks)],
        "energy_j": [[1000.0 + 3000 * i] * n for i in range(ticks)],
        "lease": [[lease] * n for _ in range(ticks)],
        "foreign": [[0] * n for _ in range(ticks)],
        "processes": [{"gpu": uuids[0], "pid": 4242, "used_mb": 30000, "lease": lease}],
    }


def _report(agent: Any, seq: int, **parts: Any) -> dict[str, Any]:
    return {
        "protocol": 2,
        "boot_epoch": agent.epoch,
        "seq": seq,
        "sent_at": datetime.now(UTC).isoformat(),
        **parts,
    }


@pytest.fixture
def bound(world):
    """A node with a bind command pending for a fresh lease (not yet started)."""
    world.fund(world.alpha, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.save()
    agent = register(world, "n1")
    job = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 5}, hours=1)
    lease = leased(job)
    bind = Command.objects.get(lease=lease, kind=CommandKind.BIND)
    return world, agent, job, lease, bind


def test_register_says_protocol_2_and_the_pace(world):
    agent = register(world, "n1")
    again = agent.post("register", {"name": "n1", "gpus": gpus_of("n1", 8), "agent_version": "2"})
    body = again.json()
    assert body["protocol"] == 2 and body["poll_seconds"] == settings.AGENT_POLL_SECONDS
    assert (
        settings.AGENT_REPORT_FLOOR_S * 0.9 <= body["report_seconds"] <= settings.AGENT_REPORT_CEILING_S * 1.1
    )


def _documented(answer: dict[str, Any]) -> None:
    """The view builds its answer without the serializer (a cost on every report): it must still be exactly
    what ReportReplySerializer documents, field for field and in its formats."""
    reply = ReportReplySerializer(data=answer)
    assert reply.is_valid(), reply.errors
    assert ReportReplySerializer(reply.validated_data).data == answer


def test_one_report_acks_starts_measures_and_settles_in_order(bound):
    _, agent, job, lease, bind = bound
    uuids = [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu")]
    final = _counters(lease, 1234.5)
    final.pop("lease")
    body = _report(
        agent,
        1,
        gpus=[{"uuid": u, "healthy": True, "error": ""} for u in uuids],
        running=[],
        acks=[{"command": bind.pk, "result": "applied", "detail": "started as pid 4242"}],
        started=[{"lease": lease.pk, "at": (timezone.now() - timedelta(seconds=20)).isoformat()}],
        exited=[{"lease": lease.pk, "exit_code": 0, "usage": final}],
        usage=_usage(uuids, lease.pk),
        leases=[_counters(lease, 1000.0)],
    )
    before = Node.objects.get(pk=agent.node.pk).last_heartbeat
    response = agent.post("report", body)
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["acked"] == 1 and answer["state"] == "up" and "ignored" not in answer
    assert (
        settings.AGENT_REPORT_FLOOR_S * 0.9
        <= answer["report_seconds"]
        <= settings.AGENT_REPORT_CEILING_S * 1.1
    )
    assert answer["poll_seconds"] == settings.AGENT_POLL_SECONDS
    assert "Deprecation" not in response
    _documented(answer)
    bind.refresh_from_db()
    lease.refresh_from_db()
    job.refresh_from_db()
    assert bind.state == CommandState.ACKED
    # Started, then the exit after the counters: the final counters (1234.5 s) are what was charged.
    assert lease.state == LeaseState.ENDED and job.state == JobState.COMPLETED
    assert lease.charged == -(-12345 * lease.price // 36000)
    assert Node.objects.get(pk=agent.node.pk).last_heartbeat != before
    # The same report again (a lost answer): nothing changes, nothing is charged twice.
    again = agent.post("report", body)
    assert again.status_code == 200
    lease.refresh_from_db()
    assert lease.charged == -(-12345 * lease.price // 36000)
    assert LeaseUsage.objects.get(lease=lease).gpu_seconds == 1234.5
    call_command("ledger_check", stdout=StringIO())


def test_gzip_bodies_are_decoded_and_bombs_refused(bound):
    _, agent, _, lease, bind = bound
    body = _report(agent, 1, acks=[{"command": bind.pk, "result": "applied"}])
    packed = gzip.compress(json.dumps(body).encode())
    response = agent.api.post(
        "/api/v1/agent/report", packed, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 200, response.json()
    bind.refresh_from_db()
    assert bind.state == CommandState.ACKED
    # A small body inflating past the cap: 413, never inflated whole.
    bomb = gzip.compress(b'{"protocol": 2, "pad": "' + b" " * (settings.AGENT_BODY_MAX_BYTES + 10) + b'"}')
    assert len(bomb) < 100_000
    refused = agent.api.post(
        "/api/v1/agent/report", bomb, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )
    assert refused.status_code == 413 and "decompresses" in refused.json()["detail"]
    broken = agent.api.post(
        "/api/v1/agent/report", packed[:-12], content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )
    assert broken.status_code == 400
    other = agent.api.post(
        "/api/v1/agent/report", packed, content_type="application/json", HTTP_CONTENT_ENCODING="br"
    )
    assert other.status_code == 400 and "Content-Encoding" in other.json()["fields"]
    # Every agent POST takes gzip, protocol 1's too.
    heartbeat = agent.api.post(
        "/api/v1/agent/heartbeat",
        gzip.compress(b'{"boot_epoch": 1}'),
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert heartbeat.status_code == 200 and heartbeat["Deprecation"] == "true"


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"surprise": 1}, "surprise"),
        ({"acks": [{"command": 1, "result": "applied", "why": "x"}]}, "acks"),
        ({"acks": [{"command": 1, "result": "applied"}] * 1001}, "acks"),
        ({"running": list(range(1, 300))}, "running"),
        ({"protocol": 1}, "protocol"),
        ({"usage": {"gpus": ["GPU-a"], "t": [1.7e9], "util": [[101]]}}, "usage.util[0][0]"),
        ({"usage": {"gpus": ["GPU-a"], "t": [1.7e9], "util": [[1]]}}, "usage.mem_mb"),
        ({"leases": [{"lease": 1}]}, "leases[0].gpu_seconds"),
    ],
)
def test_hostile_reports_are_400_naming_the_field_and_change_nothing(bound, extra, field):
    _, agent, _, _, bind = bound
    before = Node.objects.get(pk=agent.node.pk).last_heartbeat
    response = agent.post("report", {**_report(agent, 1), **extra})
    assert response.status_code == 400, response.json()
    assert field in json.dumps(response.json()["fields"]), response.json()
    assert Node.objects.get(pk=agent.node.pk).last_heartbeat == before


def test_the_matrix_entry_is_named(bound):
    _, agent, _, lease, _ = bound
    usage = _usage(["GPU-n1-0", "GPU-n1-1"], lease.pk)
    usage["util"][1][1] = 140
    response = agent.post("report", _report(agent, 1, usage=usage))
    assert response.status_code == 400 and "usage.util[1][1]" in response.json()["fields"]


def test_another_nodes_items_are_ignored_the_rest_applied(bound):
    world, agent, _, lease, bind = bound
    other = register(world, "n2")
    # n2 acknowledges n1's bind and reports n1's lease started and exited: all ignored, its heartbeat counts.
    response = other.post(
        "report",
        _report(
            other,
            1,
            acks=[{"command": bind.pk, "result": "refused", "detail": "not mine"}],
            started=[{"lease": lease.pk}],
            exited=[{"lease": lease.pk, "exit_code": 1}],
        ),
    )
    assert response.status_code == 200
    assert response.json()["ignored"] == {"acks": [bind.pk], "started": [lease.pk], "exited": [lease.pk]}
    _documented(response.json())
    bind.refresh_from_db()
    lease.refresh_from_db()
    assert bind.state == CommandState.PENDING and lease.state != LeaseState.ENDED
    assert Node.objects.get(pk=other.node.pk).last_heartbeat is not None
    # n1's own report with one foreign ack beside its own: its own is applied.
    response = agent.post(
        "report",
        _report(
            agent,
            1,
            acks=[{"command": 999999, "result": "applied"}, {"command": bind.pk, "result": "applied"}],
        ),
    )
    assert response.status_code == 200 and response.json()["ignored"] == {"acks": [999999]}
    bind.refresh_from_db()
    assert bind.state == CommandState.ACKED


def test_protocol_1_still_answers_with_a_deprecation_header(bound):
    _, agent, _, lease, bind = bound
    assert agent.heartbeat()["Deprecation"] == "true"
    ack = agent.post(f"commands/{bind.pk}/ack", {"result": "applied"})
    assert ack.status_code == 200 and ack["Deprecation"] == "true"
    started = agent.post(f"leases/{lease.pk}/started", {})
    assert started.status_code == 200 and started["Deprecation"] == "true"
    usage = agent.post("usage", agent.report([counters(lease, 10.0)]))
    assert usage.status_code == 200 and usage["Deprecation"] == "true"
    commands = agent.get("commands")
    assert commands.status_code == 200 and "Deprecation" not in commands  # the poll stays in protocol 2


def test_the_poll_may_wait_as_long_as_the_server_says(bound):
    _, agent, _, _, _ = bound
    # The bind is pending: answered at once whatever the wait.
    assert agent.get(f"commands?wait={settings.AGENT_POLL_SECONDS}").status_code == 200
    too_long = agent.get(f"commands?wait={settings.AGENT_POLL_SECONDS + 1}")
    assert too_long.status_code == 400 and "wait" in too_long.json()["fields"]


# Pacing (nodeagent/services/pacing.py)


def test_the_interval_follows_the_fleet_and_the_budget(settings):
    settings.AGENT_REPORT_FLOOR_S, settings.AGENT_REPORT_CEILING_S = 10, 30
    assert pacing.paced_interval(live_nodes=10, budget_rps=50) == 10  # the floor
    assert pacing.paced_interval(live_nodes=1000, budget_rps=50) == 20
    assert pacing.paced_interval(live_nodes=12_500, budget_rps=50) == 30  # the ceiling
    assert pacing.paced_interval(live_nodes=12_500, budget_rps=500) == 25


def test_answers_are_staggered_and_the_budget_is_a_policy_knob(world, settings):
    settings.AGENT_REPORT_FLOOR_S, settings.AGENT_REPORT_CEILING_S = 1, 1000
    for i in range(30):
        register(world, f"n{i}")
    policy = market_policy()
    policy.agent_report_budget_rps = 2
    policy.save()
    forget_cached_policy()
    pacing.forget()
    rng = random.Random(7)
    drawn = [pacing.pace(rng).report_seconds for _ in range(200)]
    assert 13.5 <= min(drawn) < 14.5 and 15.5 < max(drawn) <= 16.5  # 30 / 2 = 15, +-10%
    assert len(set(drawn)) > 10
    admin = world.client(world.admin)
    response = admin.patch("/api/v1/policy", {"agent_report_budget_rps": 0}, format="json")
    assert response.status_code == 400 and "agent_report_budget_rps" in response.json()["fields"]
    assert admin.patch("/api/v1/policy", {"agent_report_budget_rps": 3}, format="json").status_code == 200
    pacing.forget()
    assert 9 <= pacing.pace(rng).report_seconds <= 11


def test_a_silent_node_is_down_within_90_s_and_a_reporting_one_is_not(world):
    """The shipped cadence: agents report at the interval each answer gives (at the ceiling here, the
    slowest: a large fleet), the node check runs every NODE_CHECK_SECONDS. One node falls silent right
    after a report; it must be down within 90 s of the report it would have sent next, and the one that
    keeps reporting never."""
    assert (
        settings.AGENT_REPORT_CEILING_S * 1.1 + settings.NODE_DOWN_SECONDS + settings.NODE_CHECK_SECONDS <= 90
    )
    quiet, busy = register(world, "quiet"), register(world, "busy")
    rng = random.Random(3)
    start = timezone.now()
    # The worst case for the silent node: it was given the longest interval, and died right after reporting.
    for agent in (quiet, busy):
        report_apply(node=agent.node, report=AgentReport(boot_epoch=1, seq=1, sent_at=start), now=start)
    silent_from = start + timedelta(seconds=pacing.slowest_report_s())
    pace = pacing.paced_interval(live_nodes=100_000, budget_rps=1)  # the ceiling
    next_busy = start + timedelta(seconds=pace * rng.uniform(0.9, 1.1))
    seq, down_at = 1, None
    check = start + timedelta(seconds=rng.uniform(0, settings.NODE_CHECK_SECONDS))
    while check < start + timedelta(seconds=300):
        while next_busy <= check:
            seq += 1
            report_apply(
                node=busy.node, report=AgentReport(boot_epoch=1, seq=seq, sent_at=next_busy), now=next_busy
            )
            next_busy += timedelta(seconds=pace * rng.uniform(0.9, 1.1))
        lost = nodes_mark_down(timeout_s=settings.NODE_DOWN_SECONDS, now=check)
        assert busy.node.pk not in lost
        if quiet.node.pk in lost:
            down_at = check
        check += timedelta(seconds=settings.NODE_CHECK_SECONDS)
    assert down_at is not None and (down_at - start).total_seconds() <= 90
    assert (down_at - silent_from).total_seconds() <= 90
    assert Node.objects.get(pk=busy.node.pk).state == Node.State.UP
    assert Node.objects.get(pk=quiet.node.pk).state == Node.State.DOWN
