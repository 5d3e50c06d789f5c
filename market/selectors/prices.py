"""Reads of prices: each GPU type's current bounds and posted price, and what past rounds published."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import OuterRef, QuerySet, Subquery

from inventory.models import GpuType
from market.models import RoundPrice


@dataclass(frozen=True)
class PriceBoardRow:
    """One GPU type now, micro-credits per GPU-hour: reserve r, the posted price p the next round starts from,
    the maximum, and the spot price of the newest round that published prices for it (None before the first
    round, or when that round had no spot winner)."""

    gpu_type: str
    reserve: int
    posted: int
    max: int
    spot: int | None
    last_round_id: int | None
    last_round_at: datetime | None


def _newest_first(qs: QuerySet[RoundPrice]) -> QuerySet[RoundPrice]:
    return qs.order_by("-round__slot", "-round_id", "gpu_type__name")


def price_board() -> list[PriceBoardRow]:
    """Every GPU type by name with its newest round price (two queries, whatever the number of types)."""
    newest = _newest_first(RoundPrice.objects.filter(gpu_type=OuterRef("pk"))).values("pk")[:1]
    types = list(GpuType.objects.annotate(last_price=Subquery(newest)).order_by("name"))
    last = RoundPrice.objects.select_related("round").in_bulk([t.last_price for t in types if t.last_price])
    return [_row(t, last.get(t.last_price)) for t in types]


def _row(gpu_type: GpuType, last: RoundPrice | None) -> PriceBoardRow:
    return PriceBoardRow(
        gpu_type=gpu_type.name,
        reserve=gpu_type.reserve_price,
        posted=gpu_type.current_posted,
        max=gpu_type.max_price,
        spot=last.spot if last else None,
        last_round_id=last.round_id if last else None,
        last_round_at=last.round.slot if last else None,
    )


def price_history(
    *, gpu_type: GpuType | None = None, since: datetime | None = None, before: datetime | None = None
) -> QuerySet[RoundPrice]:
    """Round prices, newest round first; rounds whose slot is in [since, before)."""
    qs = RoundPrice.objects.select_related("round", "gpu_type")
    if gpu_type is not None:
        qs = qs.filter(gpu_type=gpu_type)
    if since is not None:
        qs = qs.filter(round__slot__gte=since)
    if before is not None:
        qs = qs.filter(round__slot__lt=before)
    return _newest_first(qs)
