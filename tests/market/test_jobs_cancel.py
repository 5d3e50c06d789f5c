"""Cancel: a pending job at once; an allocated or running one through a release command and lease_stopped,
which settles its hold; a preempting one when its lease stops. The leases here are made by hand (with a real
ledger hold); the round engine that normally makes them has its own tests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from inventory.models import GpuType
from market.models import (
    Command,
    CommandKind,
    EndReason,
    Hold,
    HoldState,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
    LeaseUsage,
    Round,
)
from market.selectors.ledger import ledger_problems, tenant_balance
from market.selectors.policy import current_fence
from market.services.jobs import JobFinished, job_cancel, job_submit
from market.services.leases import lease_request_stop, lease_stopped, settle_key
from market.services.ledger_bulk import ledger_hold
from tests.conftest import World

pytestmark = pytest.mark.django_db

PRICE = 6_000_000  # per GPU-hour


def url(job: Job, what: str = "") -> str:
    return f"/api/v1/tenants/{job.tenant.slug}/jobs/{job.pk}" + (f"/{what}" if what else "")


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    world.fund(world.alpha, 1000)
    return world


def submit(w: World, user: Any = None, *, gpus: int = 2) -> Job:
    job, _ = job_submit(
        tenant=w.alpha,
        submitter=user or w.amy,
        name="train",
        command="python train.py",
        gpus=gpus,
        bids=[(w.h100, 8_000_000)],
        max_seconds=3600,
        grace_seconds=30,
    )
    return job


def start(job: Job, *, state: str = LeaseState.RUNNING, age_s: int = 600) -> Lease:
    """A lease for the job as a round would make it: a round, a ledger hold, GPUs bound, the job moved on."""
    from inventory.models import Gpu

    now = timezone.now()
    rnd = Round.objects.create(slot=now + timedelta(days=Round.objects.count()), period_s=300)
    key = f"round:{rnd.pk}:job:{job.pk}"
    ledger_hold(tenant=job.tenant, amount=job.gpus * PRICE * job.max_seconds // 3600, key=key)
    gpu_type = GpuType.objects.get(name=job.limits[0]["gpu_type"])
    free = Gpu.objects.filter(node__gpu_type=gpu_type).exclude(lease_gpus__active=True)
    gpus = list(free.order_by("node__name", "index")[: job.gpus])
    lease = Lease.objects.create(
        job=job,
        tenant=job.tenant,
        round=rnd,
        node=gpus[0].node,
        gpu_type=gpu_type,
        tier="S",
        preemptible=True,
        price=PRICE,
        gpus=job.gpus,
        max_seconds=job.max_seconds,
        grace_seconds=job.grace_seconds,
        hold_key=key,
        state=state,
        started_at=now - timedelta(seconds=age_s),
        running_at=now if state == LeaseState.RUNNING else None,
    )
    LeaseGpu.objects.bulk_create(LeaseGpu(lease=lease, gpu=gpu) for gpu in gpus)
    job_state = JobState.RUNNING if state == LeaseState.RUNNING else JobState.ALLOCATED
    Job.objects.filter(pk=job.pk).update(state=job_state)
    job.refresh_from_db()
    return lease


def test_cancel_pending_job_ends_it_at_once(market: World) -> None:
    w = market
    job = submit(w)
    resp = w.client(w.amy).post(url(job, "cancel"))
    assert resp.status_code == 200, resp.json()
    assert resp.json()["state"] == "cancelled"
    assert resp.json()["ended_at"] and resp.json()["cancel_requested_at"]
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.ended_at is not None
    assert AuditEvent.objects.filter(action="job.cancel").count() == 1
    again = w.client(w.amy).post(url(job, "cancel"))
    assert (again.status_code, again.json()) == (200, resp.json())
    assert AuditEvent.objects.filter(action="job.cancel").count() == 1


@pytest.mark.parametrize("lease_state", [LeaseState.RUNNING, LeaseState.ALLOCATED])
def test_cancel_running_job_releases_its_lease_then_settles(
    market: World, lease_state: str, django_assert_max_num_queries: Any
) -> None:
    w = market
    job = submit(w, gpus=4)
    lease = start(job, state=lease_state, age_s=900)
    resp = w.client(w.amy).post(url(job, "cancel"))
    assert resp.status_code == 200, resp.json()
    assert resp.json()["state"] == job.state  # unchanged until the agent reports the job gone
    assert resp.json()["cancel_requested_at"] is not None
    lease.refresh_from_db()
    assert (lease.state, lease.end_reason) == (LeaseState.STOPPING, EndReason.CANCELLED)
    release = Command.objects.get(lease=lease)
    assert (release.kind, release.node_id, release.fence) == (
        CommandKind.RELEASE,
        lease.node_id,
        current_fence(),
    )
    assert release.payload["reason"] == "cancelled" and release.payload["grace_seconds"] == 30

    # Cancelling again while it stops: unchanged, no second command.
    again = w.client(w.alice).post(url(job, "cancel"))
    assert (
        again.status_code == 200 and again.json()["cancel_requested_at"] == resp.json()["cancel_requested_at"]
    )
    assert Command.objects.filter(lease=lease).count() == 1

    # Settlement charges what the agent measured: its 4 GPUs for the 900 s the job ran.
    LeaseUsage.objects.create(lease=lease, node=lease.node, gpu_seconds=4 * 900, samples=900)
    lease_stopped(lease_id=lease.pk)
    lease.refresh_from_db()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.ended_at is not None
    assert lease.state == LeaseState.ENDED and lease.end_reason == EndReason.CANCELLED
    hold = Hold.objects.get(key=lease.hold_key)
    charge = 4 * PRICE * 900 // 3600
    assert (hold.state, hold.charged, lease.charged) == (HoldState.SETTLED, charge, charge)
    assert not LeaseGpu.objects.filter(lease=lease, active=True).exists()
    assert tenant_balance(tenant=w.alpha).held == 0
    assert ledger_problems() == []

    client, path = w.client(w.amy), url(job)
    # auth 3, tenant, job, bids, outcomes, leases, their GPUs, their usage, ledger entries, types
    with django_assert_max_num_queries(12):
        detail = client.get(path).json()
    (shown,) = detail["leases"]
    assert {k: shown[k] for k in ("id", "node", "tier", "price", "state", "end_reason", "charged")} == {
        "id": lease.pk,
        "node": lease.node.name,
        "tier": "S",
        "price": PRICE,
        "state": "ended",
        "end_reason": "cancelled",
        "charged": charge,
    }
    assert shown["usage"]["gpu_seconds"] == 4 * 900 and shown["usage"]["samples"] == 900
    assert shown["hold_amount"] == hold.amount and shown["hold_amount_credits"] == "24"
    assert [(g["index"], g["uuid"]) for g in shown["bound_gpus"]] == [
        (i, f"GPU-{lease.node.name}-{i}") for i in range(4)
    ]
    assert [(c["kind"], c["amount"], c["released"], c["lease"]) for c in detail["charges"]] == [
        ("hold", hold.amount, 0, lease.pk),
        ("settle", charge, hold.amount - charge, lease.pk),
    ]
    assert detail["charges"][1]["key"] == settle_key(lease.pk)


def test_cancel_a_gang_on_two_nodes_sends_a_release_to_each(market: World) -> None:
    w = market
    job = submit(w, gpus=16)
    lease = start(job)
    w.client(w.alice).post(url(job, "cancel"))
    commands = Command.objects.filter(lease=lease, kind=CommandKind.RELEASE)
    assert commands.count() == 2 and len({c.node_id for c in commands}) == 2


def test_cancel_preempting_job_ends_it_cancelled_instead_of_requeued(market: World) -> None:
    w = market
    job = submit(w)
    lease = start(job)
    lease_request_stop(lease_id=lease.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=1)
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTING
    resp = w.client(w.amy).post(url(job, "cancel"))
    assert resp.status_code == 200 and resp.json()["state"] == "preempting"
    assert list(Command.objects.filter(lease=lease).values_list("kind", flat=True)) == [CommandKind.PREEMPT]
    lease_stopped(lease_id=lease.pk)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.ended_at is not None
    assert ledger_problems() == []


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.FAILED, JobState.EXPIRED])
def test_cancel_finished_job_is_409(market: World, state: str) -> None:
    w = market
    job = submit(w)
    Job.objects.filter(pk=job.pk).update(state=state, ended_at=timezone.now())
    resp = w.client(w.amy).post(url(job, "cancel"))
    assert resp.status_code == 409
    assert resp.json()["error"] == "job_finished"
    job.refresh_from_db()
    assert job.state == state and job.cancel_requested_at is None
    with pytest.raises(JobFinished):
        job_cancel(job=job, actor=w.admin)


def test_preempted_job_back_in_pending_cancels_at_once(market: World) -> None:
    w = market
    job = submit(w)
    lease = start(job)
    lease_request_stop(lease_id=lease.pk, kind=CommandKind.PREEMPT, reason=EndReason.PREEMPTED, fence=1)
    lease_stopped(lease_id=lease.pk)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job_cancel(job=job, actor=w.amy).state == JobState.CANCELLED
