"""Where winners' GPUs stand when the commit writes them (one rule for the round's winners and for the jobs a
round moves): bound meanwhile, taken out of service, or on a node without the sandbox for an untrusted team."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from accounts.models import Tenant
from inventory.models import Gpu, Node
from market import bulk
from market.models import LeaseGpu
from market.services.commit_rows import Winner
from market.services.sandbox_bind import unconfined_gpus

TAKEN, UNAVAILABLE, UNCONFINED = "taken", "unavailable", "unconfined"


@dataclass(frozen=True)
class GpuStanding:
    taken: set[int]  # bound to a live lease since the freeze
    unavailable: set[int]  # unhealthy, or its node down, draining or retired: it takes no work
    unconfined: set[int]  # on a node whose kernel refused the sandbox (issue 35)
    trusted: set[int]  # teams an admin trusts on such nodes (read only when there is one)

    def problem(self, winner: Winner) -> str | None:
        """Why `winner` cannot be written on its GPUs (TAKEN, UNAVAILABLE, UNCONFINED), None when it can."""
        gpus = [slot.gpu_id for slot in winner.gang]
        if any(g in self.taken for g in gpus):
            return TAKEN
        if any(g in self.unavailable for g in gpus):
            return UNAVAILABLE
        if winner.tenant_id not in self.trusted and any(g in self.unconfined for g in gpus):
            return UNCONFINED
        return None


def gpu_standing(winners: Iterable[Winner]) -> GpuStanding:
    """The standing of every GPU these winners' gangs name, in four reads."""
    gpu_ids = bulk.any_of([slot.gpu_id for w in winners for slot in w.gang])
    taken = set(LeaseGpu.objects.filter(active=True, gpu_id__in=gpu_ids).values_list("gpu_id", flat=True))
    unavailable = set(
        Gpu.objects.filter(pk__in=gpu_ids)
        .filter(Q(healthy=False) | ~Q(node__state=Node.State.UP))
        .values_list("pk", flat=True)
    )
    unconfined = unconfined_gpus(gpu_ids)
    trusted = set(Tenant.objects.filter(trusted=True).values_list("pk", flat=True)) if unconfined else set()
    return GpuStanding(taken, unavailable, unconfined, trusted)
