"""GPU type price bounds as market policy: the inventory's write (inventory.services.gpu_types.gpu_type_save),
recorded as a policy version with the admin's reason (docs/policy.md §Versions)."""

from __future__ import annotations

from accounts.models import User
from inventory.models import GpuType
from inventory.services.gpu_types import gpu_type_save
from market.services.policy_versions import policy_versioned


def gpu_type_policy_save(
    *,
    name: str,
    memory_gb: int,
    reserve_price: int,
    max_price: int,
    actor: User | None = None,
    reason: str = "",
) -> GpuType:
    """Create or update a GPU type as gpu_type_save does; a change of its price bounds (or a new type) records a
    policy version with `reason`, a write that changes nothing records none."""
    with policy_versioned(actor=actor, reason=reason):
        return gpu_type_save(
            name=name, memory_gb=memory_gb, reserve_price=reserve_price, max_price=max_price, actor=actor
        )
