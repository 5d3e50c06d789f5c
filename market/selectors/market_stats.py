"""Market-wide figures over time for the admin console: prices, utilisation, demand against supply, revenue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum
from django.db.models.functions import TruncDay

from market.models import AccountKind, BidOutcome, Posting, Round, RoundPrice, RoundState

MAX_ROUNDS = 500


@dataclass(frozen=True)
class RoundFigures:
    slot: datetime
    gpus_free: int  # free when the round froze
    demand_gpus: int  # GPUs asked for by the bids in its book
    won_gpus: int


def round_figures(*, since: datetime | None = None) -> list[RoundFigures]:
    """Committed rounds, oldest first (the newest MAX_ROUNDS), with their demand in GPUs (one grouped query)."""
    qs = Round.objects.filter(state__in=[RoundState.COMMITTED, RoundState.DISPATCHED])
    if since is not None:
        qs = qs.filter(slot__gte=since)
    rounds = list(
        qs.order_by("-slot").values_list("pk", "slot", "gpus_free", "gpus_allocated", "counters")[:MAX_ROUNDS]
    )[::-1]
    # A round records its demand (counters["demand_gpus"]) and its won GPUs (gpus_allocated); rounds from before
    # it recorded demand wrote an outcome row per bid, summed from those.
    old = [r[0] for r in rounds if "demand_gpus" not in (r[4] or {})]
    asked = dict(
        BidOutcome.objects.filter(round_id__in=old)
        .values_list("round_id")
        .annotate(n=Sum("job__gpus"))
        .order_by()
    )
    won = dict(
        BidOutcome.objects.filter(round_id__in=old, won=True)
        .values_list("round_id")
        .annotate(n=Sum("job__gpus"))
        .order_by()
    )
    out = []
    for pk, slot, free, allocated, counters in rounds:
        demand = (counters or {}).get("demand_gpus")
        if demand is None:
            out.append(RoundFigures(slot, free, int(asked.get(pk, 0)), int(won.get(pk, 0))))
        else:
            out.append(RoundFigures(slot, free, int(demand), int(allocated)))
    return out


def price_series(*, since: datetime | None = None) -> dict[str, list[tuple[datetime, int, int | None]]]:
    """{type: [(slot, posted, spot)]}, oldest first."""
    qs = RoundPrice.objects.select_related("gpu_type", "round")
    if since is not None:
        qs = qs.filter(round__slot__gte=since)
    out: dict[str, list[tuple[datetime, int, int | None]]] = {}
    rows = qs.order_by("-round__slot").values_list("gpu_type__name", "round__slot", "posted", "spot")[
        : MAX_ROUNDS * 8
    ]
    for name, slot, posted, spot in reversed(list(rows)):
        out.setdefault(name, []).append((slot, posted, spot))
    return out


def revenue_by_day(*, since: datetime | None = None) -> list[tuple[datetime, int]]:
    qs = Posting.objects.filter(account__kind=AccountKind.REVENUE)
    if since is not None:
        qs = qs.filter(entry__created_at__gte=since)
    rows = (
        qs.annotate(day=TruncDay("entry__created_at"))
        .values("day")
        .annotate(total=Sum("amount"))
        .order_by("day")
    )
    return [(r["day"], int(r["total"])) for r in rows]
