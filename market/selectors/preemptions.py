"""Why a lease was preempted, as each viewer may see it (docs/rounds.md §Why a lease was preempted).

The round commit keeps, per preempted lease, the allocator's rule (`Lease.preempt_reason`), the round and the
job the preemption made room for (`preempted_for`). That job is another tenant's (reclaim never takes the
claimant's own leases), so it stays behind the tenant wall: a member of the preempted lease's tenant learns
the rule and whether the GPUs went to their own team (then which job); only a platform admin learns which
team and which job they went to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from market.models import Job, Lease, PreemptReason


@dataclass(frozen=True)
class Claimant:
    job_id: int
    tenant_id: int
    tenant_slug: str


@dataclass(frozen=True)
class Preemption:
    reason: str  # PreemptReason value: the allocator's stable name
    label: str
    round: int | None
    for_own_tenant: bool
    for_job: int | None  # the claimant's job: the viewer's own tenant's, or any for a platform admin
    for_tenant: str | None  # the claimant's tenant slug: platform admins only


def attach_claimants(leases: Iterable[Lease]) -> None:
    """Set `claimant` (a Claimant, or None) on each lease: one query for all the preempted ones, none
    when none was."""
    rows = list(leases)
    ids = {lease.preempted_for_id for lease in rows if lease.preempted_for_id is not None}
    found = {
        pk: Claimant(pk, tenant_id, slug)
        for pk, tenant_id, slug in (
            Job.objects.filter(pk__in=ids).values_list("pk", "tenant_id", "tenant__slug") if ids else []
        )
    }
    for lease in rows:
        lease.claimant = found.get(lease.preempted_for_id or 0)  # type: ignore[attr-defined]  # an attribute the selector adds to each instance


def preemption_of(lease: Lease, *, admin: bool) -> Preemption | None:
    """Why a round preempted `lease`, for a viewer in its tenant (`admin`: a platform admin); None when no
    round did, or it did before reasons were recorded. Reads `claimant` (attach_claimants) when set."""
    if not lease.preempt_reason:
        return None
    claimant: Claimant | None = getattr(lease, "claimant", None)
    own = claimant is not None and claimant.tenant_id == lease.tenant_id
    return Preemption(
        reason=lease.preempt_reason,
        label=PreemptReason(lease.preempt_reason).label,
        round=lease.preempted_round_id,
        for_own_tenant=own,
        for_job=claimant.job_id if claimant is not None and (own or admin) else None,
        for_tenant=claimant.tenant_slug if claimant is not None and admin else None,
    )


def round_preempted(*, round_id: int) -> QuerySet[Lease]:
    """The leases a round preempted (the commit records the round on each), with what the console shows."""
    return Lease.objects.filter(preempted_round_id=round_id).select_related(
        "tenant", "node", "gpu_type", "preempted_for__tenant"
    )
