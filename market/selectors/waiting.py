"""How many rounds a pending job has waited, derived rather than counted (docs/rounds.md §Rounds waited).

The allocator's starvation guard (ARCHITECTURE.md §Clearing step 5) and the portal read it. A round counts for
a job when the round committed a book (`counts`) with the job in it and the job did not win. Writing +1 on
every loser would cost each round an UPDATE of most pending jobs (15,000 rows at 20,000 bids); instead a job
stores the newest round that had frozen when its wait began (`Job.wait_round`, see `market.models.jobs.
wait_mark`) and what it had waited before then (`Job.waited_before`), and every counting round after
`wait_round` is one more round waited while it is pending. A job that is pending but not in a round's book
(its tenant inactive, its GPU types gone, or it became pending while that round was freezing) is moved past
the round by the round's commit (`market.services.round_commit`), so that round does not count for it.

Leaving pending fixes the count in `waited_before`: 0 when the job wins (it is allocated), what it had waited
when it is cancelled. A preempted job that returns to pending starts again from 0, as a new wait.
"""

from __future__ import annotations

import numpy as np
from django.db.models import Case, F, IntegerField, OuterRef, Q, QuerySet, Subquery, When
from django.db.models.expressions import Expression
from numpy.typing import ArrayLike

from market.models import Job, JobState, Round

# Rounds that count: committed (committed_at is set in the commit's transaction) with at least one bid. A round
# that found no GPU types sets committed_at with no book, and a failed one never commits.
COUNTS = Q(committed_at__isnull=False, bids__gt=0)


class SubqueryCount(Subquery):
    """COUNT(*) of a subquery's rows, as a scalar (no GROUP BY needed)."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) _counted)"
    output_field = IntegerField()


def rounds_waited_expression() -> Expression:
    """For `Job.objects.annotate(rounds_waited=...)`: one subquery per job row, on the rounds' primary key."""
    after = Round.objects.filter(COUNTS, pk__gt=OuterRef("wait_round")).order_by().values("pk")
    return Case(
        When(state=JobState.PENDING, then=F("waited_before") + SubqueryCount(after)),
        default=F("waited_before"),
        output_field=IntegerField(),
    )


def with_rounds_waited(jobs: QuerySet[Job]) -> QuerySet[Job]:
    return jobs.annotate(rounds_waited=rounds_waited_expression())


def rounds_waited(job: Job) -> int:
    """Rounds `job` has waited: as the job selectors annotated it (`with_rounds_waited`: one query for a
    page), else derived now (one query while it is pending)."""
    annotated = job.__dict__.get("rounds_waited")
    return int(annotated) if annotated is not None else rounds_waited_of(job)


def rounds_waited_of(job: Job) -> int:
    """One job's count (one query while it is pending)."""
    if job.state != JobState.PENDING:
        return job.waited_before
    return job.waited_before + Round.objects.filter(COUNTS, pk__gt=job.wait_round).count()


def rounds_waited_before(*, round_id: int, waited_before: ArrayLike, wait_round: ArrayLike) -> np.ndarray:
    """The counts of pending jobs as round `round_id` sees them (rounds before it), for its book: one query
    for the counting round ids, then a binary search per job."""
    marks = np.asarray(wait_round, dtype=np.int64)
    base = np.asarray(waited_before, dtype=np.int64)
    if not len(marks):
        return base
    ids = np.array(
        Round.objects.filter(COUNTS, pk__gt=int(marks.min()), pk__lt=round_id)
        .order_by("pk")
        .values_list("pk", flat=True),
        dtype=np.int64,
    )
    return base + len(ids) - np.searchsorted(ids, marks, side="right")
