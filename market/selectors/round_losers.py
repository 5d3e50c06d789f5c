"""A round's losers for the console's round page, derived: a bid that lost as it had the round before writes
no outcome row (docs/rounds.md §At fleet scale, writing less), so the losers are the jobs of the round's stored
book that did not win there, each with its newest outcome up to that round (the one that stood for it then)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from market.models import BidOutcome, Round
from market.selectors.book import Snapshot


@dataclass(frozen=True)
class Loser:
    job_id: int
    outcome: BidOutcome | None  # None: no outcome of it up to the round is kept (retention pruned it)
    unchanged_since: int | None  # the round whose row stood for this one, when the job lost there as before


class RoundLosers(Sequence[Loser]):
    """The round's losing jobs in job order, read a page at a time (Paginator slices it): the page's newest
    outcomes are one query, not the round's 200,000."""

    def __init__(self, round_id: int, jobs: list[int]) -> None:
        self.round_id, self.jobs = round_id, jobs

    def __len__(self) -> int:
        return len(self.jobs)

    @overload
    def __getitem__(self, i: int) -> Loser: ...
    @overload
    def __getitem__(self, i: slice) -> list[Loser]: ...
    def __getitem__(self, i: int | slice) -> Loser | list[Loser]:
        if isinstance(i, int):
            return self._read([self.jobs[i]])[0]
        return self._read(self.jobs[i])

    def _read(self, jobs: list[int]) -> list[Loser]:
        newest: dict[int, BidOutcome] = {}
        rows = (
            BidOutcome.objects.filter(job_id__in=jobs, round_id__lte=self.round_id)
            .select_related("job__tenant", "gpu_type")
            .order_by("job_id", "-round_id")
        )
        for o in rows:
            newest.setdefault(o.job_id, o)
        out = []
        for job in jobs:
            kept = newest.get(job)
            since = kept.round_id if kept is not None and kept.round_id != self.round_id else None
            out.append(Loser(job, kept, since))
        return out


def round_losers(rnd: Round) -> RoundLosers | None:
    """The round's losers from its stored book; None once retention dropped the book (then only the round's
    own outcome rows are left: the losses that changed there)."""
    blob = Round.objects.filter(pk=rnd.pk).values_list("book", flat=True).first()
    if blob is None:
        return None
    in_book = Snapshot.load(blob).book.bids.job.tolist()
    won = set(BidOutcome.objects.filter(round=rnd, won=True).values_list("job_id", flat=True))
    return RoundLosers(rnd.pk, sorted(j for j in in_book if j not in won))
