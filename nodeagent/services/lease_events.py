"""What agents report about their leases: a command applied or refused, a job started, a job exited.

The lease and money rules stay in market.services.leases; this module maps the agent's reports onto the part
of the lease on the reporting node, and market.services.lease_parts applies the gang rules: exit code 0 ->
completed, else failed; a requested stop keeps its reason; a stop the agent made itself at the lease's
expiry -> expired. Every call is safe to repeat.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from inventory.models import Node
from market.models import (
    Command,
    CommandKind,
    CommandState,
    EndReason,
    Lease,
    LeasePart,
    LeaseState,
    LeaseUsage,
    PartState,
)
from market.selectors.policy import current_fence, market_policy
from market.services.lease_parts import part_ended, part_started
from market.services.leases import lease_request_stop
from nodeagent.services.usage import lease_counters_save
from nodeagent.services.usage_parse import LeaseCounters

STOPPED_BY = ("preempt", "release", "expiry")


@transaction.atomic
def command_ack(*, command: Command, result: str, detail: str = "", now: datetime | None = None) -> Command:
    """The agent applied or refused a command. A refused bind means the part will never start there: the
    gang is stopped and its job requeued, unbilled (market.services.lease_parts). A refused stop for a part
    that never started (its node never ran it) ends that part too. The first answer stands."""
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
        part_ended(
            lease_id=command.lease_id,
            node_id=command.node_id,
            state=PartState.REFUSED,
            detail=detail,
            now=now,
        )
    elif result == "refused" and _never_started(command):
        part_ended(
            lease_id=command.lease_id,
            node_id=command.node_id,
            state=PartState.REFUSED,
            detail=f"its node never ran it ({detail})" if detail else "its node never ran it",
            now=now,
        )
    return command


def _never_started(command: Command) -> bool:
    return not LeasePart.objects.filter(
        lease_id=command.lease_id, node_id=command.node_id, started_at__isnull=False
    ).exists()


def lease_started(*, node: Node, lease: Lease, at: datetime | None, now: datetime | None = None) -> Lease:
    """The job's process runs on this node: its part of the lease has started, and the lease and its job
    become running once every part has. `at` (the agent's clock) is kept within [allocation, now]."""
    now = now or timezone.now()
    when = min(max(at or now, lease.started_at), now)
    return part_started(lease_id=lease.pk, node_id=node.pk, at=when, now=now)


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
    reason: str | None = None,
) -> Lease:
    """The job's processes on this node are gone. Its final counters are stored (keeping the maximum), then
    its part ends; the lease is settled once its last part has (market.services.lease_parts), and a
    repeated report changes nothing.

    A requested stop keeps the reason it was requested with (stopped_by only matters when the agent stopped
    the job on its own). A part of a gang that fails stops the others after their grace period.
    """
    now = now or timezone.now()
    # The lease row first, as every settlement path takes it (then the ledger's accounts): repeated or
    # concurrent exit reports of one lease queue here.
    Lease.objects.select_for_update(no_key=True).filter(pk=lease.pk).first()
    if usage is not None:
        lease_counters_save(node_id=node.pk, counters=[usage], now=now)
    LeaseUsage.objects.get_or_create(lease=lease, node=node)
    LeaseUsage.objects.filter(lease=lease, node=node, exited_at__isnull=True).update(
        exit_code=exit_code, exit_reason=reason or "", exited_at=now
    )
    return part_ended(
        lease_id=lease.pk,
        node_id=node.pk,
        state=PartState.EXITED,
        exit_code=exit_code,
        signal=signal,
        stopped_by=stopped_by,
        now=now,
    )


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
