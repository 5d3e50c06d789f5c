"""What agents report about their leases: a command applied or refused, a job started, a job exited.

The lease and money rules stay in market.services.leases; this module maps the agent's reports onto them:
exit code 0 -> completed, else failed; a requested stop keeps its reason; a stop the agent made itself at the
lease's expiry -> expired. Every call is safe to repeat.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from inventory.models import Node
from market.models import (
    LIVE_LEASE_STATES,
    Command,
    CommandKind,
    CommandState,
    EndReason,
    Lease,
    LeaseState,
    LeaseUsage,
)
from market.selectors.policy import current_fence, market_policy
from market.services.leases import lease_nodes, lease_request_stop, lease_running, lease_stopped
from nodeagent.services.usage import lease_counters_save
from nodeagent.services.usage_parse import LeaseCounters

STOPPED_BY = ("preempt", "release", "expiry")


@transaction.atomic
def command_ack(*, command: Command, result: str, detail: str = "", now: datetime | None = None) -> Command:
    """The agent applied or refused a command. A refused bind means the job will never start there: the
    lease is settled (nothing was measured) and its job requeued. The first answer stands."""
    now = now or timezone.now()
    command = Command.objects.select_for_update(no_key=True).get(pk=command.pk)
    if command.state == CommandState.ACKED:
        return command
    command.state, command.acked_at, command.result, command.result_detail = (
        CommandState.ACKED,
        now,
        result,
        detail[:500],
    )
    command.save(update_fields=["state", "acked_at", "result", "result_detail"])
    if result == "refused" and command.kind == CommandKind.BIND:
        lease_abandon(lease_id=command.lease_id, reason=EndReason.NODE_LOST, now=now)
    return command


def lease_started(*, lease: Lease, at: datetime | None, now: datetime | None = None) -> Lease:
    """The job's process runs: the lease and its job become running. `at` (the agent's clock) is kept
    within [allocation, now]."""
    now = now or timezone.now()
    when = min(max(at or now, lease.started_at), now)
    return lease_running(lease_id=lease.pk, now=when)


def _reason(exit_code: int | None, signal: int | None, stopped_by: str | None) -> EndReason:
    if stopped_by == "expiry":
        return EndReason.EXPIRED
    if stopped_by == "preempt":
        return EndReason.PREEMPTED
    if stopped_by == "release":
        return EndReason.CANCELLED
    return EndReason.COMPLETED if exit_code == 0 and signal is None else EndReason.FAILED


@transaction.atomic
def lease_exited(
    *,
    node: Node,
    lease: Lease,
    exit_code: int | None,
    signal: int | None,
    stopped_by: str | None,
    usage: LeaseCounters | None,
    now: datetime | None = None,
) -> Lease:
    """The job's processes on this node are gone. Its final counters are stored (keeping the maximum), then
    the lease is settled once; a repeated report finds it ended and changes nothing.

    A requested stop keeps the reason it was requested with (stopped_by only matters when the agent stopped
    the job on its own). A gang on several nodes is settled at its first exit; the other nodes get a release.
    """
    now = now or timezone.now()
    # The lease row first, as every settlement path takes it (then the ledger's accounts): repeated or
    # concurrent exit reports of one lease queue here.
    Lease.objects.select_for_update(no_key=True).filter(pk=lease.pk).first()
    if usage is not None:
        lease_counters_save(node_id=node.pk, counters=[usage], now=now)
    LeaseUsage.objects.get_or_create(lease=lease, node=node)
    LeaseUsage.objects.filter(lease=lease, node=node, exited_at__isnull=True).update(
        exit_code=exit_code, exited_at=now
    )
    reason = _reason(exit_code, signal, stopped_by)
    return lease_abandon(lease_id=lease.pk, reason=reason, now=now)


def lease_abandon(*, lease_id: int, reason: EndReason, now: datetime | None = None) -> Lease:
    """Settle the lease now for what was measured; nodes of its gang that may still run it get a release."""
    now = now or timezone.now()
    lease = Lease.objects.get(pk=lease_id)
    if lease.state == LeaseState.ENDED:
        return lease
    if lease.state in LIVE_LEASE_STATES and len(lease_nodes(lease.pk)) > 1:
        lease_request_stop(
            lease_id=lease.pk, kind=CommandKind.RELEASE, reason=reason, fence=current_fence(), now=now
        )
    return lease_stopped(lease_id=lease.pk, reason=reason, now=now)


def leases_release_idle(*, now: datetime | None = None) -> list[int]:
    """The idle policy (off while MarketPolicy.idle_util_pct is 0): release every running lease whose GPUs,
    on every node of it, have stayed under the threshold for idle_seconds. Its owner sees end reason idle."""
    now = now or timezone.now()
    policy = market_policy()
    if not policy.idle_util_pct:
        return []
    cutoff = now - timedelta(seconds=policy.idle_seconds)
    busy = LeaseUsage.objects.filter(lease=OuterRef("lease")).filter(
        Q(idle_since__isnull=True) | Q(idle_since__gt=cutoff)
    )
    due = sorted(
        set(
            LeaseUsage.objects.filter(idle_since__lte=cutoff, lease__state=LeaseState.RUNNING)
            .exclude(Exists(busy))
            .values_list("lease_id", flat=True)
        )
    )
    for lease_id in due:
        lease_request_stop(
            lease_id=lease_id, kind=CommandKind.RELEASE, reason=EndReason.IDLE, fence=current_fence(), now=now
        )
    return due
