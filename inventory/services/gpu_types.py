"""Writes for GPU types and their price bounds. A price bound is market policy too: admins change it through
market.services.gpu_type_prices.gpu_type_policy_save, which runs this write inside a policy version (the
inventory, below the market, cannot record one itself)."""

from __future__ import annotations

from django.db import transaction

from accounts.audit import audit
from accounts.models import User
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from inventory.models import GpuType


def prices_check(reserve_price: int, max_price: int) -> None:
    if reserve_price < 0:
        raise PolicyError("reserve_price", "must not be negative")
    if max_price > MAX_AMOUNT:
        raise PolicyError("max_price", "is beyond the largest amount the ledger accepts")
    if max_price < reserve_price:
        raise PolicyError("max_price", "must be at least the reserve price")


@transaction.atomic
def gpu_type_save(
    *, name: str, memory_gb: int, reserve_price: int, max_price: int, actor: User | None = None
) -> GpuType:
    """Create or update the GPU type called name (prices in micro-credits per GPU-hour).

    An update locks the row and is audited as {field: [old, new]} for the fields it changes, so the log shows
    what a price bound was before; an update that changes nothing writes no audit row.
    """
    if memory_gb <= 0:
        raise PolicyError("memory_gb", "must be positive")
    prices_check(reserve_price, max_price)
    values = {"memory_gb": memory_gb, "reserve_price": reserve_price, "max_price": max_price}
    gpu_type, created = GpuType.objects.select_for_update(no_key=True).get_or_create(
        name=name, defaults=values
    )
    if created:
        audit(actor=actor, tenant=None, action="gpu_type.create", detail={"name": name, **values})
        return gpu_type
    diff = {f: [getattr(gpu_type, f), v] for f, v in values.items() if getattr(gpu_type, f) != v}
    if diff:
        for field, (_, new) in diff.items():
            setattr(gpu_type, field, new)
        gpu_type.save(update_fields=list(diff))
        audit(actor=actor, tenant=None, action="gpu_type.update", detail={"name": name, **diff})
    return gpu_type
