"""A lease's last checkpoint, as its node's agents report it (docs/agent.md §Checkpoints).

The agents' reports reach here only for the leases of the reporting node that are not settled yet (the caller,
nodeagent.services.usage, drops the rest), so no agent can date another node's lease. Each time is kept only
when it moves the lease's checkpoint forward, is not before the lease started (the checkpoint directory is kept
across a job's leases) and is not ahead of the server's clock by more than CLOCK_SKEW (it is then stored as
now): a retried or late report changes nothing, and no node can make its lease look safer to preempt than it
is by dating a checkpoint in the future.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Q

from market.models import Lease, LeaseState

log = logging.getLogger(__name__)

CLOCK_SKEW = timedelta(seconds=30)


def checkpoints_save(reported: Iterable[tuple[int, datetime | None]], *, now: datetime) -> list[int]:
    """Move each lease's last_checkpoint_at forward to the newest time reported for it; the leases changed.

    One read for the batch; a write only for a lease whose checkpoint moved, which is rare next to the reports
    (each report repeats the newest checkpoint)."""
    newest: dict[int, datetime] = {}
    for lease, at in reported:
        if at is None:
            continue
        if at > now + CLOCK_SKEW:
            log.warning("lease %d: checkpoint at %s is ahead of the server's clock; ignored", lease, at)
            continue
        at = min(at, now)
        newest[lease] = max(newest.get(lease, at), at)
    if not newest:
        return []
    changed = []
    current = Lease.objects.filter(pk__in=list(newest)).exclude(state=LeaseState.ENDED)
    for lease, started, last in current.values_list("pk", "started_at", "last_checkpoint_at"):
        at = newest[lease]
        if at < started or (last is not None and at <= last):
            continue
        # Conditional: a concurrent report with a later time wins whichever commits first.
        if (
            Lease.objects.filter(pk=lease)
            .filter(Q(last_checkpoint_at__isnull=True) | Q(last_checkpoint_at__lt=at))
            .update(last_checkpoint_at=at)
        ):
            changed.append(lease)
    return changed
