"""Tenants' guaranteed GPUs per type: the one place that keeps each type's sum within the cluster's GPUs.

Lives in market, not beside the Guarantee model in accounts, because the rule reads GPU types and the nodes
that carry them, and accounts sits below both (docs/architecture.md).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Sum

from accounts.audit import audit
from accounts.models import Tenant, User
from config.errors import PolicyError
from inventory.models import Gpu, GpuType, Node
from market.models import Guarantee
from market.services.policy_versions import policy_versioned


def cluster_gpus(gpu_type: GpuType) -> int | None:
    """GPUs of this type the cluster has, or None while no node of the type has registered."""
    if not Node.objects.filter(gpu_type=gpu_type).exists():
        return None
    return Gpu.objects.filter(node__gpu_type=gpu_type).exclude(node__state=Node.State.DOWN).count()


def guarantee_check(*, tenant: Tenant, gpu_type: GpuType, gpus: int) -> None:
    """Raise PolicyError if this guarantee would push the type's total past the cluster's GPUs of it."""
    if gpus < 0:
        raise PolicyError("gpus", "must not be negative")
    others = (
        Guarantee.objects.filter(gpu_type=gpu_type)
        .exclude(tenant=tenant)
        .aggregate(total=Sum("gpus"))["total"]
        or 0
    )
    capacity = cluster_gpus(gpu_type)
    if capacity is not None and others + gpus > capacity:
        raise PolicyError(
            "gpus",
            f"guarantees for {gpu_type.name} would total {others + gpus} GPUs but the cluster has {capacity}",
        )


@transaction.atomic
def guarantee_set(
    *, tenant: Tenant, gpu_type: GpuType, gpus: int, actor: User | None = None, reason: str = ""
) -> Guarantee | None:
    """Set a tenant's guaranteed GPUs of one type (0 removes it).

    The one place that keeps the sum of guarantees for a type within the cluster's GPUs of that type (once
    nodes exist). The GPU type row is locked so two concurrent changes cannot both squeeze under the limit.
    A change records a policy version (docs/policy.md §Versions).
    """
    with policy_versioned(actor=actor, reason=reason):
        GpuType.objects.select_for_update(no_key=True).get(pk=gpu_type.pk)
        guarantee_check(tenant=tenant, gpu_type=gpu_type, gpus=gpus)
        audit(
            actor=actor,
            tenant=tenant,
            action="guarantee.set",
            detail={"gpu_type": gpu_type.name, "gpus": gpus},
        )
        if gpus == 0:
            Guarantee.objects.filter(tenant=tenant, gpu_type=gpu_type).delete()
            return None
        guarantee, _ = Guarantee.objects.update_or_create(
            tenant=tenant, gpu_type=gpu_type, defaults={"gpus": gpus}
        )
        return guarantee
