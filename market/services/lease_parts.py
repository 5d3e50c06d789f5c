"""A gang lives and dies together (docs/agent.md §Multi-node gangs; ARCHITECTURE.md §Node agent protocol).

A lease on several nodes is one job in several parts, one per node; what each node's agent reports lands on
its part (market.models.LeasePart), and these rules decide what the lease does:

- it counts as running once every part has started;
- a part that cannot start (its bind refused) stops the others; the job is requeued (node_lost) and the
  lease is not billed: the gang never ran;
- a part that exits non-zero (or on a signal, or with no exit status) stops the others, each after its
  grace period; the lease ends failed, its end_detail naming the part, node and exit code;
- a part whose node is declared down ends the gang as node_lost ("node X (part N) down");
- a part that exits 0 waits for the others: the lease completes when every part has;
- the lease is settled once, when its last part has ended, for the sum of what every part measured
  (market.services.leases.lease_stopped; one ledger key per lease).

A lease of one node is a gang of one part, and these rules give it the behaviour it always had. A stop
requested for the whole lease (preemption, cancel, expiry) already reaches every part, and its reason stands.
Every function is safe to repeat: a part that has ended keeps its first report.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from inventory.models import Node
from market.gang import part_ranks
from market.models import (
    LIVE_LEASE_STATES,
    PART_ENDED,
    CommandKind,
    EndReason,
    Lease,
    LeasePart,
    LeaseState,
    PartState,
)
from market.selectors.lease_parts import part_sentence
from market.selectors.policy import current_fence
from market.services.leases import lease_nodes, lease_request_stop, lease_running, lease_stopped


def _part(lease: Lease, node_id: int) -> LeasePart:
    ranks = part_ranks(lease_nodes(lease.pk))
    part, _ = LeasePart.objects.get_or_create(
        lease=lease,
        node_id=node_id,
        defaults={"rank": ranks.get(node_id, 0), "state": PartState.RUNNING},
    )
    return part


@transaction.atomic
def part_started(*, lease_id: int, node_id: int, at: datetime, now: datetime | None = None) -> Lease:
    """The part's job runs on its node; the lease (and its job) becomes running once every part does, at
    the moment the last one started."""
    now = now or timezone.now()
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state == LeaseState.ENDED:
        return lease
    part = _part(lease, node_id)
    if part.started_at is None:
        part.started_at = at
        part.save(update_fields=["started_at"])
    nodes = lease_nodes(lease.pk)
    starts = [
        t for t in LeasePart.objects.filter(lease=lease).values_list("started_at", flat=True) if t is not None
    ]
    if len(starts) >= len(nodes):
        return lease_running(lease_id=lease.pk, now=max(starts))
    return lease


def exit_reason(exit_code: int | None, signal: int | None, stopped_by: str | None) -> EndReason:
    """How one part's end reads: a stop the agent made at the lease's expiry, a requested stop, or the
    job's own exit (0 completed, anything else failed)."""
    if stopped_by == "expiry":
        return EndReason.EXPIRED
    if stopped_by == "preempt":
        return EndReason.PREEMPTED
    if stopped_by == "release":
        return EndReason.CANCELLED
    return EndReason.COMPLETED if exit_code == 0 and signal is None else EndReason.FAILED


@transaction.atomic
def part_ended(
    *,
    lease_id: int,
    node_id: int,
    state: PartState,
    exit_code: int | None = None,
    signal: int | None = None,
    stopped_by: str | None = None,
    detail: str = "",
    now: datetime | None = None,
) -> Lease:
    """The part on node_id is over: exited (with its exit code, signal and who stopped it), refused (its
    bind) or lost (its node down). Applies the gang rules in the module docstring."""
    now = now or timezone.now()
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state == LeaseState.ENDED:
        return lease
    part = _part(lease, node_id)
    if part.state in PART_ENDED:
        return lease
    part.state, part.ended_at, part.exit_code, part.signal = state, now, exit_code, signal
    part.detail = detail[:500]
    part.save(update_fields=["state", "ended_at", "exit_code", "signal", "detail"])
    reason = _part_reason(part, stopped_by)
    ended = set(LeasePart.objects.filter(lease=lease, state__in=PART_ENDED).values_list("node_id", flat=True))
    nodes = lease_nodes(lease.pk)
    if reason != EndReason.COMPLETED and lease.state in LIVE_LEASE_STATES:
        if len(nodes) > 1:  # a lease of one node says it all with its end reason
            name = Node.objects.filter(pk=node_id).values_list("name", flat=True).first() or str(node_id)
            Lease.objects.filter(pk=lease.pk).update(end_detail=part_sentence(part, name)[:300])
        if set(nodes) - ended:
            lease_request_stop(
                lease_id=lease.pk,
                kind=CommandKind.RELEASE,
                reason=reason,
                fence=current_fence(),
                now=now,
                skip_nodes=ended,
            )
    if set(nodes) - ended:
        return Lease.objects.get(pk=lease.pk)
    never_ran = LeasePart.objects.filter(lease=lease, state=PartState.REFUSED).exists()
    return lease_stopped(lease_id=lease.pk, reason=reason, now=now, bill=not never_ran)


def _part_reason(part: LeasePart, stopped_by: str | None) -> EndReason:
    if part.state in (PartState.REFUSED, PartState.LOST):
        return EndReason.NODE_LOST
    return exit_reason(part.exit_code, part.signal, stopped_by)
