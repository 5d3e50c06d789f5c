"""Settlement from measurement: measured GPU-seconds x price (+ energy), capped at the hold, exactly once."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from market.models import CommandKind, EndReason, EntryKind, Hold, JobState, JournalEntry, LeaseState
from market.selectors.policy import market_policy
from market.selectors.usage import charge_for
from market.services.leases import lease_request_stop, settle_key
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, leased, register

pytestmark = pytest.mark.django_db


def _final(lease, gpu_seconds: float, **extra) -> dict[str, Any]:
    body = counters(lease, gpu_seconds, **extra)
    body.pop("lease"), body.pop("_gpus")
    return body


def _settles(lease) -> int:
    return JournalEntry.objects.filter(key=settle_key(lease.pk), kind=EntryKind.SETTLE).count()


def test_charge_is_measured_seconds_times_price(running):
    _, agent, job, lease = running
    agent.post("usage", agent.report([counters(lease, 1000.0)]))
    body = {"exit_code": 0, "usage": _final(lease, 1234.5)}
    response = agent.post(f"leases/{lease.pk}/exited", body)
    assert response.status_code == 200
    expected = -(-12345 * lease.price // 36000)  # ceil(1234.5 x price / 3600)
    assert response.json() == {
        "lease": lease.pk,
        "state": "ended",
        "end_reason": "completed",
        "charged": expected,
    }
    hold = Hold.objects.get(key=lease.hold_key)
    assert hold.charged == expected < hold.amount
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    # Sent twice (the agent's retry after a lost answer): settled once.
    again = agent.post(f"leases/{lease.pk}/exited", {"exit_code": 1, "usage": _final(lease, 9999.0)})
    assert (
        again.status_code == 200
        and again.json()["charged"] == expected
        and again.json()["end_reason"] == "completed"
    )
    assert _settles(lease) == 1
    call_command("ledger_check", stdout=StringIO())


def test_charge_is_capped_at_the_hold(running):
    _, agent, _, lease = running
    agent.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": _final(lease, 2 * 3600 * 10.0)})
    lease.refresh_from_db()
    hold = Hold.objects.get(key=lease.hold_key)
    assert lease.charged == hold.charged == hold.amount == 2 * lease.price


def test_energy_is_charged_at_the_policy_price(running):
    _, agent, _, lease = running
    policy = market_policy()
    policy.energy_price_kwh = 150_000  # 0.15 credits per kWh
    policy.save()
    agent.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": _final(lease, 3600.0, energy_j=7.2e6)})
    lease.refresh_from_db()
    assert lease.charged == lease.price + 2 * 150_000


def test_charge_rounds_up_exactly():
    assert charge_for(gpu_seconds=1.0, energy_j=0.0, price=3600, energy_price_kwh=0) == 1
    assert charge_for(gpu_seconds=0.1, energy_j=0.0, price=3600, energy_price_kwh=0) == 1
    assert charge_for(gpu_seconds=0.0, energy_j=0.0, price=3600, energy_price_kwh=10**9) == 0
    assert charge_for(gpu_seconds=7200.0, energy_j=3.6e6, price=5_000_000, energy_price_kwh=1) == 10_000_001


def test_a_failed_job_and_a_signal(running):
    _, agent, job, lease = running
    agent.post(f"leases/{lease.pk}/exited", {"exit_code": None, "signal": 9, "usage": _final(lease, 10.0)})
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.end_reason, job.state) == (EndReason.FAILED, JobState.FAILED)


def test_expiry_enforced_by_the_agent_ends_the_job_expired(running):
    _, agent, job, lease = running
    agent.post(
        f"leases/{lease.pk}/exited",
        {"exit_code": -15, "stopped_by": "expiry", "usage": _final(lease, 7200.0)},
    )
    job.refresh_from_db()
    assert job.state == JobState.EXPIRED


def test_a_requested_preemption_keeps_its_reason_and_requeues(running):
    _, agent, job, lease = running
    lease_request_stop(lease_id=lease.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=1)
    preempt = [c for c in agent.commands() if c["kind"] == "preempt"]
    assert preempt and preempt[0]["payload"]["grace_seconds"] == 30
    agent.post(
        f"leases/{lease.pk}/exited", {"exit_code": 0, "stopped_by": "preempt", "usage": _final(lease, 600.0)}
    )
    lease.refresh_from_db()
    job.refresh_from_db()
    assert (lease.state, lease.end_reason, job.state) == (
        LeaseState.ENDED,
        EndReason.PREEMPTED,
        JobState.PENDING,
    )
    assert lease.charged == -(-600 * lease.price // 3600)


def test_the_owner_reads_the_usage_and_log_tail(running):
    w, agent, job, lease = running
    agent.post("usage", agent.report([counters(lease, 100.0, log_tail="step 1 loss 0.9\n", util_avg=87.5)]))
    detail = w.client(w.alice).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    (shown,) = detail["leases"]
    assert shown["usage"]["gpu_seconds"] == 100.0 and shown["usage"]["util_avg"] == 87.5
    assert detail["log_tail"] == "step 1 loss 0.9\n"
    # Someone outside the tenant sees nothing of it.
    assert w.client(w.bob).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").status_code == 404


def test_a_gang_on_two_nodes_is_settled_once_at_its_last_part_for_the_sum_of_both_parts(world):
    world.fund(world.alpha, 1000)
    n1, n2 = register(world, "n1"), register(world, "n2")
    job = make_job(world.alpha, world.alice, gpus=16, limits={world.h100: 5})
    lease = leased(job)
    assert {g.gpu.node_id for g in lease.lease_gpus.select_related("gpu")} == {n1.node.pk, n2.node.pk}
    n2.post("usage", n2.report([counters(lease, 150.0)]))
    first = n1.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": _final(lease, 100.0)})
    # A part that completed waits for the other: nothing is settled and nothing is stopped.
    assert first.json()["state"] != "ended" and _settles(lease) == 0
    assert [c["kind"] for c in n2.commands() if c["lease"] == lease.pk] == ["bind"]
    last = n2.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": _final(lease, 400.0)})
    assert last.json()["state"] == "ended"
    lease.refresh_from_db()
    assert (lease.end_reason, lease.charged) == ("completed", -(-500 * lease.price // 3600))
    again = n2.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": _final(lease, 900.0)})
    assert again.json()["charged"] == lease.charged
    assert _settles(lease) == 1
    call_command("ledger_check", stdout=StringIO())
