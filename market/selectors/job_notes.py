"""A line per job for lists (the command line's `gpumarket jobs`): the tier and node of its newest lease, and,
for a pending job, the sentence for why its newest round did not run it (the portal's job page explains each
round the same way, market.selectors.explain). A fixed number of queries per page, whatever its length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import OuterRef, Subquery

from market.models import Bid, BidOutcome, Job, JobState, Lease
from market.selectors.explain import explain_outcomes


@dataclass(frozen=True)
class JobNote:
    tier: str | None
    node: str | None
    reason: str


def job_notes(jobs: Sequence[Job]) -> dict[int, JobNote]:
    ids = [j.pk for j in jobs]
    newest: dict[int, Lease] = {}
    for lease in Lease.objects.filter(job_id__in=ids).select_related("node").order_by("job_id", "-pk"):
        newest.setdefault(lease.job_id, lease)
    reasons = _reasons([j for j in jobs if j.state == JobState.PENDING])
    out = {}
    for job in jobs:
        found = newest.get(job.pk)
        node = found.node.name if found is not None and found.node is not None else None
        out[job.pk] = JobNote(found.tier if found else None, node, reasons.get(job.pk, ""))
    return out


def _reasons(pending: Sequence[Job]) -> dict[int, str]:
    if not pending:
        return {}
    last = BidOutcome.objects.filter(job=OuterRef("pk")).order_by("-round_id", "-pk").values("pk")[:1]
    picked = Job.objects.filter(pk__in=[j.pk for j in pending]).annotate(last=Subquery(last))
    outcome_ids = [pk for pk in picked.values_list("last", flat=True) if pk is not None]
    outcomes = {o.job_id: o for o in BidOutcome.objects.filter(pk__in=outcome_ids).select_related("gpu_type")}
    history: dict[int, list[Bid]] = {}
    for bid in Bid.objects.filter(job_id__in=list(outcomes)):
        history.setdefault(bid.job_id, []).append(bid)
    out = {}
    for job in pending:
        outcome = outcomes.get(job.pk)
        if outcome is not None:
            out[job.pk] = explain_outcomes(job, [outcome], history.get(job.pk, []))[0].sentence
    return out
