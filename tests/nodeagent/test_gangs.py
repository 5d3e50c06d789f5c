"""Multi-node gangs: the bind's gang, and the gang living and dying together (market.services.lease_parts)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from market.gang import rendezvous_port
from market.models import EndReason, EntryKind, JobState, JournalEntry, LeasePart, LeaseState, PartState
from market.services.jobs import job_cancel
from market.services.leases import settle_key
from nodeagent.services.heartbeat import node_lost
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import FakeAgent, counters, leased, register

pytestmark = pytest.mark.django_db


def _final(lease, gpu_seconds: float) -> dict[str, Any]:
    body = counters(lease, gpu_seconds)
    body.pop("lease"), body.pop("_gpus")
    return body


def _settles(lease) -> int:
    return JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count()


def _binds(agent: FakeAgent, lease) -> list[dict[str, Any]]:
    return [c for c in agent.commands() if c["lease"] == lease.pk and c["kind"] == "bind"]


def _kinds(agent: FakeAgent, lease) -> list[str]:
    """The node's pending commands for the lease."""
    return [c["kind"] for c in agent.commands() if c["lease"] == lease.pk]


def _start(agent: FakeAgent, lease) -> None:
    """What an agent does with its bind: apply it, then report the part started."""
    for bind in _binds(agent, lease):
        agent.post(f"commands/{bind['id']}/ack", {"result": "applied", "detail": "started"})
    agent.post(f"leases/{lease.pk}/started", {})


@pytest.fixture
def gang(world):
    """A 16-GPU job of alpha's on two 8-GPU nodes with addresses, bound (not yet started)."""
    world.fund(world.alpha, 1000)
    a = register(world, "node-a", address="10.0.0.2")
    b = register(world, "node-b", address="Gpu-B.example.org.")
    job = make_job(world.alpha, world.alice, gpus=16, limits={world.h100: 5}, grace=45)
    return world, a, b, job, leased(job)


def test_each_bind_carries_the_whole_gang_and_the_rendezvous(gang):
    _, a, b, _, lease = gang
    (bind_a,), (bind_b,) = _binds(a, lease), _binds(b, lease)
    port = rendezvous_port(lease.pk, (29500, 29999))
    nodes = ["10.0.0.2", "gpu-b.example.org"]  # rank order: the nodes in id order; the name as stored
    common = {"nnodes": 2, "gpus_per_node": 8, "gang_gpus": 16, "nodes": nodes, "rdzv_port": port}
    assert bind_a["payload"]["gang"] == {"rank": 0, "rdzv_addr": "10.0.0.2", **common}
    assert bind_b["payload"]["gang"] == {"rank": 1, "rdzv_addr": "10.0.0.2", **common}
    assert len(bind_a["payload"]["gpus"]) == len(bind_b["payload"]["gpus"]) == 8


def test_the_rendezvous_port_is_one_per_lease_within_the_range():
    assert rendezvous_port(7, (29500, 29999)) == 29507
    assert rendezvous_port(507, (29500, 29999)) == 29507  # the range wraps after 500 leases
    assert {rendezvous_port(i, (40000, 40009)) for i in range(100, 110)} == set(range(40000, 40010))
    assert rendezvous_port(12345, (31000, 31000)) == 31000


def test_the_gang_runs_only_once_every_part_has_started(gang):
    _, a, b, job, lease = gang
    assert a.post(f"leases/{lease.pk}/started", {}).json()["state"] == "allocated"
    job.refresh_from_db()
    assert job.state == JobState.ALLOCATED
    assert a.post(f"leases/{lease.pk}/started", {}).json()["state"] == "allocated"  # a repeat is one part
    assert b.post(f"leases/{lease.pk}/started", {}).json()["state"] == "running"
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert set(LeasePart.objects.filter(lease=lease).values_list("rank", "state")) == {
        (0, PartState.RUNNING),
        (1, PartState.RUNNING),
    }


def test_a_part_that_cannot_start_stops_the_others_and_the_job_is_requeued_unbilled(gang):
    world, a, b, job, lease = gang
    _start(a, lease)
    a.post("usage", a.report([counters(lease, 80.0)]))
    (bind_b,) = _binds(b, lease)
    b.post(f"commands/{bind_b['id']}/ack", {"result": "refused", "detail": "cannot start the job: ENOMEM"})
    lease.refresh_from_db()
    assert lease.state == LeaseState.STOPPING and lease.end_reason == EndReason.NODE_LOST
    assert lease.end_detail == "part 1 on node node-b could not start: cannot start the job: ENOMEM"
    assert _kinds(a, lease) == ["release"] and _kinds(b, lease) == []  # its bind was answered
    done = a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 15, "stopped_by": "release", "usage": _final(lease, 90.0)},
    )
    assert done.json()["state"] == "ended" and done.json()["charged"] == 0
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert _settles(lease) == 1
    call_command("ledger_check", stdout=StringIO())


def test_a_part_that_exits_non_zero_stops_the_others_after_their_grace_and_the_job_fails_naming_it(gang):
    world, a, b, job, lease = gang
    for agent in (a, b):
        _start(agent, lease)
    b.post(f"leases/{lease.pk}/exited", {"exit_code": 3, "usage": _final(lease, 100.0)})
    lease.refresh_from_db()
    assert (lease.state, lease.end_reason) == (LeaseState.STOPPING, EndReason.FAILED)
    assert lease.end_detail == "part 1 on node node-b exited with code 3"
    release = [c for c in a.commands() if c["lease"] == lease.pk and c["kind"] == "release"]
    assert len(release) == 1 and release[0]["payload"]["grace_seconds"] == 45
    assert _kinds(b, lease) == []  # the part that ended gets no stop
    a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 15, "stopped_by": "release", "usage": _final(lease, 300.0)},
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.state, lease.end_reason, job.state) == (LeaseState.ENDED, EndReason.FAILED, JobState.FAILED)
    assert lease.charged == -(-400 * lease.price // 3600)  # both parts' measurements, summed
    assert _settles(lease) == 1
    detail = world.client(world.alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    (shown,) = detail["leases"]
    assert shown["end_detail"] == "part 1 on node node-b exited with code 3"
    assert [(p["rank"], p["node"], p["state"], p["exit_code"], p["signal"]) for p in shown["parts"]] == [
        (0, "node-a", "exited", None, 15),
        (1, "node-b", "exited", 3, None),
    ]
    call_command("ledger_check", stdout=StringIO())


def test_cancel_stops_every_part_and_its_reason_stands(gang):
    world, a, b, job, lease = gang
    for agent in (a, b):
        _start(agent, lease)
    job_cancel(job=job, actor=world.alice)
    assert _kinds(a, lease) == ["release"] and _kinds(b, lease) == ["release"]
    a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 15, "stopped_by": "release", "usage": _final(lease, 10.0)},
    )
    lease.refresh_from_db()
    assert lease.state == LeaseState.STOPPING  # the other part still runs its grace
    b.post(
        f"leases/{lease.pk}/exited", {"exit_code": 1, "stopped_by": "release", "usage": _final(lease, 20.0)}
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.end_reason, job.state) == (EndReason.CANCELLED, JobState.CANCELLED)
    assert lease.charged == -(-30 * lease.price // 3600)


def test_a_node_lost_under_one_part_ends_the_whole_gang_as_node_down(gang):
    world, a, b, job, lease = gang
    for agent in (a, b):
        _start(agent, lease)
    b.post("usage", b.report([counters(lease, 50.0)]))
    node_lost(node=b.node)
    lease.refresh_from_db()
    assert lease.end_detail == "node node-b (part 1) down" and lease.end_reason == EndReason.NODE_LOST
    assert _kinds(a, lease) == ["release"]
    a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 15, "stopped_by": "release", "usage": _final(lease, 60.0)},
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.state, job.state) == (LeaseState.ENDED, JobState.PENDING)
    assert lease.charged == -(-110 * lease.price // 3600)  # what both parts reported; it ran
    html = world.client(world.alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    assert [p["state"] for p in html["leases"][0]["parts"]] == ["exited", "lost"]


def test_a_refused_stop_for_a_part_that_never_started_ends_that_part(gang):
    world, a, b, job, lease = gang
    _start(a, lease)
    job_cancel(job=job, actor=world.alice)
    assert _kinds(b, lease) == ["release"]  # its bind is no longer handed out: the lease is stopping
    release_b = next(c for c in b.commands() if c["lease"] == lease.pk and c["kind"] == "release")
    b.post(f"commands/{release_b['id']}/ack", {"result": "refused", "detail": "no job for lease"})
    a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 15, "stopped_by": "release", "usage": _final(lease, 5.0)},
    )
    lease.refresh_from_db()
    assert lease.state == LeaseState.ENDED and lease.charged == 0  # the gang never ran together
    assert _settles(lease) == 1


def test_preemption_stops_every_part_and_requeues_the_job_once_both_are_gone(gang):
    from market.models import CommandKind
    from market.services.leases import lease_request_stop

    world, a, b, job, lease = gang
    for agent in (a, b):
        _start(agent, lease)
    lease_request_stop(
        lease_id=lease.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=lease.round_id
    )
    assert _kinds(a, lease) == ["preempt"] and _kinds(b, lease) == ["preempt"]
    b.post(
        f"leases/{lease.pk}/exited", {"exit_code": 0, "stopped_by": "preempt", "usage": _final(lease, 30.0)}
    )
    assert _state_of(lease) == LeaseState.STOPPING
    a.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": None, "signal": 9, "stopped_by": "preempt", "usage": _final(lease, 40.0)},
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.state, lease.end_reason, job.state) == (
        LeaseState.ENDED,
        EndReason.PREEMPTED,
        JobState.PENDING,
    )
    assert lease.end_detail == "" and lease.charged == -(-70 * lease.price // 3600)
    assert _settles(lease) == 1


def _state_of(lease) -> str:
    lease.refresh_from_db()
    return str(lease.state)
