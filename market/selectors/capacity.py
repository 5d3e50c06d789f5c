"""Reads of the cluster's GPUs as the portal shows them: per GPU type how many are free, busy or down."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q

from inventory.models import GpuType
from market.models import LeaseGpu


@dataclass(frozen=True)
class TypeCapacity:
    gpu_type: str
    total: int
    busy: int  # bound to a lease
    unavailable: int  # free but on a node that is down or draining

    @property
    def free(self) -> int:
        return self.total - self.busy - self.unavailable


def gpu_capacity() -> list[TypeCapacity]:
    """Every GPU type by name (one grouped query over GPUs)."""
    from inventory.models import Gpu, Node

    bound = LeaseGpu.objects.filter(gpu=OuterRef("pk"), active=True)
    rows = (
        Gpu.objects.annotate(bound=Exists(bound))
        .values("node__gpu_type__name")
        .annotate(
            total=Count("pk"),
            busy=Count("pk", filter=Q(bound=True)),
            unavailable=Count("pk", filter=Q(bound=False) & ~Q(node__state=Node.State.UP)),
        )
        .order_by()
    )
    by_type = {r["node__gpu_type__name"]: r for r in rows}
    return [
        TypeCapacity(
            gpu_type=name,
            total=by_type.get(name, {}).get("total", 0),
            busy=by_type.get(name, {}).get("busy", 0),
            unavailable=by_type.get(name, {}).get("unavailable", 0),
        )
        for name in GpuType.objects.order_by("name").values_list("name", flat=True)
    ]
