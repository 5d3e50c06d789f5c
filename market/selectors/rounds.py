"""Reads of auction rounds for the API: market-wide figures and prices, never a tenant's outcomes."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from market.models import Round, RoundPrice


def rounds_list(*, state: str | None = None) -> QuerySet[Round]:
    """Rounds, newest slot first, with their prices. The frozen book (a large blob) is never loaded."""
    prices = RoundPrice.objects.select_related("gpu_type").order_by("gpu_type__name")
    qs = Round.objects.defer("book").prefetch_related(Prefetch("prices", queryset=prices))
    if state:
        qs = qs.filter(state=state)
    return qs.order_by("-slot", "-id")


def round_get(*, round_id: int) -> Round | None:
    return rounds_list().filter(pk=round_id).first()


def round_summary(rnd: Round, *, prices: dict[str, dict[str, int | None]] | None = None) -> dict[str, object]:
    """What the audit log keeps of a round (it outlives the book and the per-bid outcomes: see
    market.services.retention): its counts, timings, result hash and, per GPU type, the next posted price and
    the spot price in micro-credits per GPU-hour."""
    summary: dict[str, object] = {
        "round": rnd.pk,
        "slot": rnd.slot.isoformat(),
        "state": str(rnd.state),
        "bids": rnd.bids,
        "winners": rnd.winners,
        "losers": rnd.losers,
        "skipped": rnd.skipped,
        "preemptions": rnd.preemptions,
        "gpus_free": rnd.gpus_free,
        "gpus_allocated": rnd.gpus_allocated,
        "digest": rnd.digest,
        "freeze_ms": rnd.freeze_ms,
        "clear_ms": rnd.clear_ms,
        "commit_ms": rnd.commit_ms,
    }
    if rnd.error:
        summary["error"] = rnd.error[:500]
    if prices is not None:
        summary["prices"] = prices
    return summary
