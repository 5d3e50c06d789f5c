"""Data growth: what rounds and agents leave behind is pruned after the policy's retention period.

Every round stores its frozen book (a compressed snapshot of every pending bid) and one outcome row per bid, and
the outbox keeps every command; with thousands of pending jobs and a round every few minutes these outgrow
everything else. After `MarketPolicy.retention_days`:

- a round's book is dropped (the round row with its counts, timings, result hash and prices stays, and so does
  its `round.commit` audit summary); a round not finished is never touched;
- per-bid outcomes are deleted, except each job's newest one (a job's page still says why it last lost);
- shadow rounds (what a proposed policy version would have done in the round) are deleted: a version's
  accumulated shadow figures cover the retention period;
- commands acknowledged, or expired unacknowledged, are deleted;
- protocol 1's stored usage reports (UsageReport, no longer written since issue 36) are deleted; each lease
  keeps its summary (`LeaseUsage`: what it was billed from) and each node its high-water marks;
- the usage samples' upkeep runs (market.services.usage_storage): partitions made ahead, 10-s days
  downsampled to 1-minute rows and dropped whole, 1-minute days past the retention period dropped whole.

Leases, holds, journal entries and audit rows are money and history: never pruned. Work is done in batches of
`batch` rows, each its own short transaction, so a large first prune does not hold locks against the rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from market.models import DONE_STATES, BidOutcome, Command, CommandState, Round, ShadowRound, UsageReport
from market.selectors.policy import market_policy
from market.services.usage_storage import usage_storage_maintain

log = logging.getLogger(__name__)

BATCH = 5_000


@dataclass(frozen=True)
class PruneStats:
    cutoff: datetime
    books: int
    outcomes: int
    commands: int
    usage_reports: int = 0
    shadow_rounds: int = 0
    usage_days_downsampled: int = 0
    usage_minute_days_dropped: int = 0


def _in_batches(
    ids_query: Callable[[], QuerySet[Any]], delete: Callable[[list[int]], int], batch: int
) -> int:
    """Repeat: take up to `batch` ids, act on them, commit; until none are left."""
    total = 0
    while True:
        with transaction.atomic():
            ids = list(ids_query()[:batch])
            if not ids:
                return total
            total += delete(ids)


def retention_prune(*, now: datetime | None = None, batch: int = BATCH) -> PruneStats:
    """Prune what is older than the policy's retention period; safe to repeat and to run beside rounds."""
    cutoff = (now or timezone.now()) - timedelta(days=market_policy().retention_days)
    old_rounds = Round.objects.filter(slot__lt=cutoff, state__in=DONE_STATES)

    books = _in_batches(
        lambda: old_rounds.filter(book__isnull=False).order_by("pk").values_list("pk", flat=True),
        lambda ids: Round.objects.filter(pk__in=ids).update(book=None),
        batch,
    )
    newer = BidOutcome.objects.filter(job_id=OuterRef("job_id"), round_id__gt=OuterRef("round_id"))
    outcomes = _in_batches(
        lambda: (
            BidOutcome.objects.filter(round__in=old_rounds)
            .filter(Exists(newer))
            .order_by("pk")
            .values_list("pk", flat=True)
        ),
        lambda ids: BidOutcome.objects.filter(pk__in=ids).delete()[0],
        batch,
    )
    shadow_rounds = _in_batches(
        lambda: ShadowRound.objects.filter(round__in=old_rounds).order_by("pk").values_list("pk", flat=True),
        lambda ids: ShadowRound.objects.filter(pk__in=ids).delete()[0],
        batch,
    )
    done = Q(state=CommandState.ACKED, acked_at__lt=cutoff) | Q(
        state=CommandState.PENDING, expires_at__lt=cutoff
    )
    commands = _in_batches(
        lambda: Command.objects.filter(done).order_by("pk").values_list("pk", flat=True),
        lambda ids: Command.objects.filter(pk__in=ids).delete()[0],
        batch,
    )
    usage_reports = _in_batches(
        lambda: (
            UsageReport.objects.filter(received_at__lt=cutoff).order_by("pk").values_list("pk", flat=True)
        ),
        lambda ids: UsageReport.objects.filter(pk__in=ids).delete()[0],
        batch,
    )
    storage = usage_storage_maintain(now=now)
    stats = PruneStats(
        cutoff=cutoff,
        books=books,
        outcomes=outcomes,
        commands=commands,
        usage_reports=usage_reports,
        shadow_rounds=shadow_rounds,
        usage_days_downsampled=storage.days_downsampled,
        usage_minute_days_dropped=storage.minute_days_dropped,
    )
    log.info(
        "retention prune: %s books, %s outcomes, %s shadow rounds, %s commands, %s usage reports before %s",
        books,
        outcomes,
        shadow_rounds,
        commands,
        usage_reports,
        cutoff.isoformat(),
        extra={
            "books": books,
            "outcomes": outcomes,
            "shadow_rounds": shadow_rounds,
            "commands": commands,
            "usage_reports": usage_reports,
        },
    )
    return stats
