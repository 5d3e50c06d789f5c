"""Lease lifecycle after commit: started, asked to stop, stopped and settled (ARCHITECTURE.md §Money).

The round commit (market.services.rounds) creates leases; everything after that comes through here, from the
API (cancel), the rounds (preempt, expire) and the node agent (started, stopped). Each function is safe to
repeat: a lease already in the target state is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from market.models import (
    LIVE_LEASE_STATES,
    Command,
    CommandKind,
    EndReason,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
)
from market.models.jobs import wait_mark
from market.selectors.usage import measured_charge
from market.services.command_wake import commands_written
from market.services.ledger import ledger_settle
from market.services.moves import bind_moved, moved_successor

# How long an agent has to pick up a stop command before it is considered lost (the agent work re-sends).
STOP_COMMAND_TTL = timedelta(hours=1)

# Where a job goes when its lease ends for each reason.
_JOB_AFTER = {
    EndReason.COMPLETED: JobState.COMPLETED,
    EndReason.FAILED: JobState.FAILED,
    EndReason.PREEMPTED: JobState.PENDING,
    EndReason.EXPIRED: JobState.EXPIRED,
    EndReason.CANCELLED: JobState.CANCELLED,
    EndReason.NODE_LOST: JobState.PENDING,
    EndReason.IDLE: JobState.FAILED,
    EndReason.HOLD_SPENT: JobState.EXPIRED,
}


def settle_key(lease_id: int) -> str:
    return f"lease:{lease_id}:settle"


def lease_nodes(lease_id: int) -> list[int]:
    """Nodes the lease has GPUs on (a gang on whole nodes has several), in id order."""
    nodes = LeaseGpu.objects.filter(lease_id=lease_id).values_list("gpu__node_id", flat=True).distinct()
    return sorted(set(nodes))


def stop_payload(lease: Lease, kind: str) -> dict[str, object]:
    return {
        "lease": lease.pk,
        "job": lease.job_id,
        "kind": kind,
        "grace_seconds": lease.grace_seconds,
        "reason": lease.end_reason,
    }


@transaction.atomic
def lease_request_stop(
    *,
    lease_id: int,
    kind: CommandKind,
    reason: EndReason,
    fence: int,
    now: datetime | None = None,
    skip_nodes: Collection[int] = (),
) -> Lease:
    """Ask the lease's agent to stop the job (SIGTERM, grace, SIGKILL) with a preempt or release command.

    The lease becomes STOPPING and keeps its GPUs until the agent reports the job gone (lease_stopped).
    A lease already stopping or ended is returned as it is: the first reason stands. `skip_nodes`: nodes
    whose part of a gang has already ended (market.services.lease_parts) get no command.
    """
    now = now or timezone.now()
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state not in LIVE_LEASE_STATES:
        return lease
    lease.state, lease.stop_requested_at, lease.end_reason = LeaseState.STOPPING, now, reason
    lease.save(update_fields=["state", "stop_requested_at", "end_reason"])
    written = []
    for node_id in lease_nodes(lease.pk):
        if node_id in skip_nodes:
            continue
        _, created = Command.objects.get_or_create(
            lease=lease,
            node_id=node_id,
            kind=kind,
            defaults={
                "payload": stop_payload(lease, kind),
                "fence": fence,
                "expires_at": now + timedelta(seconds=lease.grace_seconds) + STOP_COMMAND_TTL,
            },
        )
        if created:
            written.append(node_id)
    commands_written(node_ids=written)
    if reason in (EndReason.PREEMPTED, EndReason.EXPIRED, EndReason.HOLD_SPENT):
        Job.objects.filter(pk=lease.job_id).exclude(state=JobState.CANCELLED).update(
            state=JobState.PREEMPTING, updated_at=now
        )
    return lease


@transaction.atomic
def lease_running(*, lease_id: int, now: datetime | None = None) -> Lease:
    """The agent started the job on the lease's GPUs."""
    now = now or timezone.now()
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state != LeaseState.ALLOCATED:
        return lease
    lease.state, lease.running_at = LeaseState.RUNNING, now
    lease.save(update_fields=["state", "running_at"])
    Job.objects.filter(pk=lease.job_id, state=JobState.ALLOCATED).update(
        state=JobState.RUNNING, updated_at=now
    )
    return lease


@transaction.atomic
def lease_stopped(
    *, lease_id: int, reason: EndReason | None = None, now: datetime | None = None, bill: bool = True
) -> Lease:
    """The job's processes are gone: free the GPUs, settle the hold, and move the job on.

    The charge is what the agents measured (market.selectors.usage.measured_charge: GPU-seconds at the
    lease's price, plus energy at the policy's price), never more than the hold; the rest of the hold is
    released. `reason` is used only when no stop was requested (the job exited by
    itself: completed or failed); a requested stop keeps its own reason. `bill=False` charges nothing (a gang
    one of whose parts could not start never ran: market.services.lease_parts).
    """
    now = now or timezone.now()
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state == LeaseState.ENDED:
        return lease
    # Lock order (docs/rounds.md §Lock order): the leases (this one, then the one a round moved its job to),
    # its job, then the hold and the accounts.
    successor = moved_successor(lease)
    job = Job.objects.select_for_update(no_key=True).filter(pk=lease.job_id).first()
    final = EndReason(lease.end_reason) if lease.end_reason else (reason or EndReason.COMPLETED)
    charge = measured_charge(lease_id=lease.pk, price=lease.price) if bill else 0
    # Its share of its tenant's round hold (a null share: a hold of its own, settled whole).
    entry = ledger_settle(
        hold_key=lease.hold_key,
        charge=charge,
        key=settle_key(lease.pk),
        share=lease.hold_share,
        lease_id=lease.pk,
    )
    LeaseGpu.objects.filter(lease=lease, active=True).update(active=False)
    lease.state, lease.ended_at, lease.end_reason = LeaseState.ENDED, now, final
    held = lease.hold_share if lease.hold_share is not None else entry.hold.amount if entry.hold else charge
    lease.charged = min(entry.amount, held)  # as the settlement capped it (a replayed entry too)
    lease.save(update_fields=["state", "ended_at", "end_reason", "charged"])
    if successor is not None and job is not None and final == EndReason.PREEMPTED:
        bind_moved(successor=successor, job=job, now=now)  # moved: it starts again on its new GPUs
    else:
        _job_after_lease(lease.job_id, final, now)
    return lease


def _job_after_lease(job_id: int, reason: EndReason, now: datetime) -> None:
    job = Job.objects.select_for_update(no_key=True).get(pk=job_id)
    if job.state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED):
        return
    target = _JOB_AFTER[reason]
    if job.cancel_requested_at is not None:
        target = JobState.CANCELLED
    job.state = target
    fields = ["state", "updated_at"]
    if target == JobState.PENDING:
        # Back in the queue: a new wait, counted from 0 by the rounds after the newest frozen one (it is in
        # no earlier book); it keeps its submit time, so its place.
        job.waited_before, job.wait_round = 0, wait_mark()
        fields += ["waited_before", "wait_round"]
    else:
        job.ended_at = now
        fields.append("ended_at")
    job.save(update_fields=fields)


def leases_expire(*, fence: int, now: datetime | None = None) -> list[int]:
    """Ask every live lease past its max hours to stop; its job ends EXPIRED. Returns the lease ids."""
    now = now or timezone.now()
    due = [
        lease_id
        for lease_id, started, max_s in Lease.objects.filter(state__in=LIVE_LEASE_STATES).values_list(
            "pk", "started_at", "max_seconds"
        )
        if started + timedelta(seconds=max_s) <= now
    ]
    for lease_id in due:
        lease_request_stop(
            lease_id=lease_id, kind=CommandKind.RELEASE, reason=EndReason.EXPIRED, fence=fence, now=now
        )
    return due
