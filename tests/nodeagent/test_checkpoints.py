"""A lease's last checkpoint, as agents report it (docs/agent.md §Checkpoints): kept on the lease, forward only,
for the reporting node's own unsettled leases, never ahead of the server's clock."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from market.models import Lease, Round, RoundState
from market.services import rounds
from nodeagent.services.checkpoints import CLOCK_SKEW
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(running):
    """The lease an hour old, so checkpoints seconds ago are from within it."""
    hour_ago = timezone.now() - timedelta(hours=1)
    Lease.objects.filter(pk=running[3].pk).update(started_at=hour_ago, running_at=hour_ago)
    running[3].refresh_from_db()
    return running


def _leased_next_round(job) -> Lease:
    """The job's lease from the next period's round (the fixture's round already ran in this one)."""
    last = Round.objects.order_by("-slot").first()
    assert last is not None
    slot = rounds.slot_of(last.slot + timedelta(seconds=last.period_s), last.period_s)
    rnd = rounds.round_advance(round_id=Round.objects.create(slot=slot, period_s=last.period_s).pk)
    assert rnd.state == RoundState.DISPATCHED, rnd.error
    return Lease.objects.get(job=job)


def _checkpoint(lease: Lease):
    return Lease.objects.values_list("last_checkpoint_at", flat=True).get(pk=lease.pk)


def _report(agent, lease, at, gpu_seconds=60.0):
    return agent.report([counters(lease, gpu_seconds, checkpoint_at=at.isoformat())])


def test_a_reported_checkpoint_is_kept_on_the_lease_and_retries_change_nothing(running):
    _, agent, _, lease = running
    assert _checkpoint(lease) is None
    at = timezone.now() - timedelta(seconds=5)
    report = _report(agent, lease, at)
    for _ in range(3):  # the agent retries a report it got no answer for
        assert agent.post("usage", copy.deepcopy(report)).status_code == 200
    assert _checkpoint(lease) == at


def test_the_checkpoint_never_moves_backwards(running):
    _, agent, _, lease = running
    newer, older = timezone.now() - timedelta(seconds=2), timezone.now() - timedelta(seconds=9)
    assert agent.post("usage", _report(agent, lease, newer, 100.0)).status_code == 200
    assert agent.post("usage", _report(agent, lease, older, 120.0)).status_code == 200  # a late report
    assert _checkpoint(lease) == newer
    # No checkpoint in a report (an older agent, or none made yet) leaves it as it is.
    assert agent.post("usage", agent.report([counters(lease, 130.0)])).status_code == 200
    assert _checkpoint(lease) == newer


def test_a_checkpoint_in_the_future_is_refused_and_a_little_skew_is_clamped_to_now(running):
    _, agent, _, lease = running
    ahead = timezone.now() + CLOCK_SKEW + timedelta(minutes=10)
    assert agent.post("usage", _report(agent, lease, ahead)).status_code == 200  # the counters still count
    assert _checkpoint(lease) is None
    before = timezone.now()
    slightly = before + timedelta(seconds=5)
    assert agent.post("usage", _report(agent, lease, slightly, 70.0)).status_code == 200
    stored = _checkpoint(lease)
    assert stored is not None and before <= stored <= timezone.now()


def test_a_checkpoint_from_before_the_lease_started_is_ignored(running):
    """The checkpoint directory outlives a lease: a file from the job's previous lease says nothing."""
    _, agent, _, lease = running
    assert (
        agent.post("usage", _report(agent, lease, lease.started_at - timedelta(hours=1))).status_code == 200
    )
    assert _checkpoint(lease) is None


def test_a_node_cannot_set_the_checkpoint_of_another_nodes_lease(running):
    world, agent, _, lease = running
    other = register(world, "n2")
    job = make_job(world.alpha, world.alice, gpus=8, limits={world.h100: 5}, hours=1)
    theirs = _leased_next_round(job)
    Lease.objects.filter(pk=theirs.pk).update(started_at=lease.started_at)
    assert theirs.node.name == "n2"
    at = timezone.now() - timedelta(seconds=1)
    # n1 reports a checkpoint for n2's lease, in a report and in an exit report.
    hostile = agent.report([counters(lease, 10.0)])
    forged = {**counters(lease, 10.0), "lease": theirs.pk, "checkpoint_at": at.isoformat()}
    forged.pop("_gpus")
    hostile["leases"].append(forged)
    assert agent.post("usage", hostile).status_code == 200
    assert _checkpoint(theirs) is None
    usage = {**counters(lease, 10.0), "checkpoint_at": at.isoformat()}
    usage.pop("lease"), usage.pop("_gpus")
    body = {"exit_code": 0, "usage": usage}
    agent.post(f"leases/{theirs.pk}/exited", body)
    theirs.refresh_from_db()
    assert theirs.last_checkpoint_at is None and theirs.ended_at is None
    # Its own node may.
    assert other.post("usage", _report(other, theirs, at)).status_code == 200
    assert _checkpoint(theirs) == at


def test_the_exit_report_carries_the_last_checkpoint(running):
    _, agent, _, lease = running
    at = timezone.now() - timedelta(seconds=3)
    usage = {**counters(lease, 50.0), "checkpoint_at": at.isoformat()}
    usage.pop("lease"), usage.pop("_gpus")
    response = agent.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": usage})
    assert response.status_code == 200, response.json()
    assert _checkpoint(lease) == at


@pytest.mark.parametrize("bad", ["yesterday", "2026-01-01T00:00:00", 12])
def test_a_malformed_checkpoint_time_names_the_field(running, bad):
    _, agent, _, lease = running
    report = agent.report([counters(lease, 10.0, checkpoint_at=bad)])
    response = agent.post("usage", report)
    assert response.status_code == 400
    assert "leases[0].checkpoint_at" in str(response.json())
