"""Step 8, fair share: the history a round leaves for the next one, written in the round's commit transaction
(allocator/fairshare.py; docs/rounds.md §Fair-share history).

After the result is written, the commit computes ``fairshare.owed_after`` from the round's frozen book (whose
``owed`` is the history as it was frozen) and its result (the state the round leaves, counted for one round
period; a longer gap only decays the history) and upserts one ``FairShareUsage`` row per tenant and type;
it also keeps the round's demand and targets as the round leaves them (``FairShareRound``) for the console. The rows name the round
that wrote them: a commit retried after a failure starts from a rolled-back transaction, and a commit that
finds its own round (or a later one) already there accrues nothing, so no round is counted twice.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from django.db.models import Max

from accounts.models import Tenant
from allocator import Book, Result, fairshare
from inventory.models import GpuType
from market import bulk
from market.models import FairShareRound, FairShareUsage, Round


def fair_share_record(*, rnd: Round, book: Book, result: Result) -> None:
    """Write the history after ``rnd`` and its per-round figures (the state ``result`` leaves:
    ``fairshare.book_demand(book, result)``); the caller holds the commit's transaction."""
    if not book.tenants.names or not book.types.names:
        return
    if FairShareUsage.objects.filter(round_id__gte=rnd.pk).exists():
        return  # this round (or a later one) already accrued: a repeated commit must not count it twice
    tenants = dict(
        Tenant.objects.filter(slug__in=bulk.any_of(list(book.tenants.names), "text")).values_list(
            "slug", "pk"
        )
    )
    types = dict(GpuType.objects.filter(name__in=list(book.types.names)).values_list("name", "pk"))
    now = datetime.fromtimestamp(book.now, tz=UTC)
    last = FairShareUsage.objects.aggregate(at=Max("updated_at"))["at"]
    dt_s = 0.0 if last is None else max(book.now - last.timestamp(), 0.0)
    owed = fairshare.owed_after(book, result, dt_s, rnd.period_s)
    pairs = [
        (i, k)
        for i, slug in enumerate(book.tenants.names)
        for k, name in enumerate(book.types.names)
        if slug in tenants and name in types
    ]
    n = len(pairs)
    # Columns through market.bulk, not 10,000 model instances: a fleet's tenants times its types, every round.
    bulk.upsert(
        FairShareUsage,
        {
            "tenant_id": [tenants[book.tenants.names[i]] for i, _k in pairs],
            "gpu_type_id": [types[book.types.names[k]] for _i, k in pairs],
            "owed_gpu_hours": [float(owed[i, k]) for i, k in pairs],
            "updated_at": [now] * n,
            "round_id": [rnd.pk] * n,
        },
        unique=["tenant_id", "gpu_type_id"],
        update=["owed_gpu_hours", "updated_at", "round_id"],
    )
    _figures(rnd, book, result, tenants, types, pairs)


def _figures(
    rnd: Round,
    book: Book,
    result: Result,
    tenants: dict[str, int],
    types: dict[str, int],
    pairs: list[tuple[int, int]],
) -> None:
    """The round's held, waiting, smallest gang and target per tenant and type, where any is non-zero."""
    demand = fairshare.book_demand(book, result)
    capacity = np.bincount(book.nodes.gpu_type, weights=book.nodes.capacity, minlength=len(book.types))
    target = fairshare.targets(
        demand.held, demand.waiting, book.tenants.guarantee, book.tenants.weight, capacity
    )
    shown = [(i, k) for i, k in pairs if demand.held[i, k] or demand.waiting[i, k] or target[i, k] > 0]
    n = len(shown)
    bulk.upsert(
        FairShareRound,
        {
            "round_id": [rnd.pk] * n,
            "slot": [rnd.slot] * n,
            "tenant_id": [tenants[book.tenants.names[i]] for i, _k in shown],
            "gpu_type_id": [types[book.types.names[k]] for _i, k in shown],
            "held": [int(demand.held[i, k]) for i, k in shown],
            "waiting": [int(demand.waiting[i, k]) for i, k in shown],
            "smallest": [
                None if not np.isfinite(demand.smallest[i, k]) else int(demand.smallest[i, k])
                for i, k in shown
            ],
            "target": [round(float(target[i, k]), 4) for i, k in shown],
            "capacity": [int(capacity[k]) for _i, k in shown],
        },
        unique=["round_id", "tenant_id", "gpu_type_id"],
    )
