"""Writes for GPU types and their price bounds (admin policy)."""

from __future__ import annotations

from django.db import transaction

from accounts.audit import audit
from accounts.models import User
from accounts.services import PolicyError
from market.models import GpuType
from market.money import MAX_AMOUNT


def _check_prices(reserve_price: int, max_price: int) -> None:
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
    """Create or update the GPU type called name (prices in micro-credits per GPU-hour)."""
    if memory_gb <= 0:
        raise PolicyError("memory_gb", "must be positive")
    _check_prices(reserve_price, max_price)
    gpu_type, created = GpuType.objects.update_or_create(
        name=name, defaults={"memory_gb": memory_gb, "reserve_price": reserve_price, "max_price": max_price}
    )
    audit(
        actor=actor,
        tenant=None,
        action="gpu_type.create" if created else "gpu_type.update",
        detail={"name": name, "memory_gb": memory_gb, "reserve_price": reserve_price, "max_price": max_price},
    )
    return gpu_type
