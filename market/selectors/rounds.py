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
