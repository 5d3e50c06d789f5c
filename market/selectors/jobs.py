"""Reads of jobs and bids: the tenant's job list and filters, one job in detail, and the gang-size limit.

The detail is a bounded number of queries whatever the job's history: the job itself, its bid versions, its
latest outcomes (capped, with a total count), its leases with their GPUs, and the ledger entries of their holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, IntegerField, OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from accounts.models import Tenant
from inventory.models import GpuType
from market.models import Bid, BidOutcome, Hold, Job, JournalEntry, Lease, LeaseGpu
from market.selectors.preemptions import attach_claimants
from market.selectors.waiting import with_rounds_waited

# The detail lists at most this many outcomes, newest first; `outcomes_count` says how many there are.
OUTCOMES_SHOWN = 100


def tenant_jobs(*, tenant: Tenant) -> QuerySet[Job]:
    """The tenant's jobs, newest first, each with `rounds_waited`; the only way views reach a job (another
    tenant's id is not here)."""
    return with_rounds_waited(
        Job.objects.filter(tenant=tenant)
        .select_related("tenant", "submitter")
        .order_by("-submitted_at", "-id")
    )


def job_list(
    *,
    tenant: Tenant,
    states: Sequence[str] = (),
    gpu_type: str | None = None,
    submitter: str | None = None,
) -> QuerySet[Job]:
    """The tenant's jobs, filtered by any of states, by a GPU type their current bid accepts, by submitter."""
    qs = tenant_jobs(tenant=tenant)
    if states:
        qs = qs.filter(state__in=states)
    if gpu_type is not None:
        qs = qs.filter(_accepts(gpu_type))
    if submitter is not None:
        qs = qs.filter(submitter__username=submitter)
    return qs


def _accepts(gpu_type: str) -> Q:
    """Jobs whose `limits` list has an entry for gpu_type.

    PostgreSQL answers with JSON containment; SQLite (local runs) has none, so there the entries are compared
    by position, up to the number of types (a bid names each type at most once).
    """
    if connection.features.supports_json_field_contains:
        return Q(limits__contains=[{"gpu_type": gpu_type}])
    positions = max(GpuType.objects.count(), 1)
    match = Q()
    for i in range(positions):
        match |= Q(**{f"limits__{i}__gpu_type": gpu_type})
    return match


def job_detail(*, tenant: Tenant, job_id: int) -> Job | None:
    """One job of the tenant with everything its detail view shows, or None.

    The job comes back with these attributes set: `history` (every Bid, oldest first, with its actor),
    `latest_outcomes` (the newest OUTCOMES_SHOWN outcomes) and `outcomes_count`, `lease_rows` (its leases,
    oldest first, each with `gpus_bound`, `usage_rows`, `hold_amount` and `claimant`: whom a preemption made
    room for, market.selectors.preemptions) and `charges` (the journal entries of the leases' holds, oldest
    first, each with its hold and `lease_id`).
    """
    outcome_count = (
        BidOutcome.objects.filter(job=OuterRef("pk"))
        .order_by()
        .values("job")
        .annotate(n=Count("pk"))
        .values("n")
    )
    outcomes = BidOutcome.objects.select_related("gpu_type").order_by("-round_id")[:OUTCOMES_SHOWN]
    gpus = LeaseGpu.objects.select_related("gpu__node").order_by("gpu__index", "pk")
    leases = (
        Lease.objects.select_related("node", "gpu_type")
        .prefetch_related(
            Prefetch("lease_gpus", queryset=gpus, to_attr="gpus_bound"),
            Prefetch("usage", to_attr="usage_rows"),  # what the agents measured (market.LeaseUsage)
            Prefetch("parts", to_attr="part_rows"),  # what each node's part did (market.LeasePart)
        )
        .order_by("started_at", "pk")
    )
    job = (
        tenant_jobs(tenant=tenant)
        .annotate(outcomes_count=Coalesce(Subquery(outcome_count), Value(0), output_field=IntegerField()))
        .prefetch_related(
            Prefetch(
                "bids", queryset=Bid.objects.select_related("actor").order_by("version"), to_attr="history"
            ),
            Prefetch("outcomes", queryset=outcomes, to_attr="latest_outcomes"),
            Prefetch("leases", queryset=leases, to_attr="lease_rows"),
        )
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        return None
    lease_rows = job.lease_rows  # django-stubs type the Prefetch(to_attr=...) attributes
    job.charges = hold_entries(leases=lease_rows)  # type: ignore[attr-defined]  # an attribute the selector adds for the serializer
    attach_claimants(lease_rows)
    return job


def hold_entries(*, leases: Iterable[Lease]) -> list[JournalEntry]:
    """The hold, settle and release entries of these leases' holds, oldest first (one query).

    A round's hold is its tenant's, shared by its winners (docs/ledger.md §Holds): of a shared hold only the
    opening entry (which names no lease) and the entries of these leases are kept, the opening one shown as
    this lease's part of it. Each entry gets `lease_id`, `share` (what its lease's part of the hold is) and
    `shown` (a hold entry: what it held for this lease); each lease gets `hold_amount` (its share; None while
    its hold does not exist).
    """
    by_key = {lease.hold_key: lease for lease in leases}
    # Not the other jobs' settlements of a shared hold: the opening entry names no lease, the rest name theirs.
    found = (
        JournalEntry.objects.filter(hold__key__in=list(by_key))
        .filter(Q(lease__isnull=True) | Q(lease__in=[lease.pk for lease in by_key.values()]))
        .select_related("hold")
        .order_by("created_at", "pk")
    )
    for lease in by_key.values():
        lease.hold_amount = None  # type: ignore[attr-defined]  # an attribute the selector adds to each instance
    entries = list(found)
    for entry in entries:
        hold = cast(Hold, entry.hold)  # every entry has one: the query filtered on its key
        lease = by_key[hold.key]
        share = lease.hold_share if lease.hold_share is not None else hold.amount
        entry.lease_id, entry.share = lease.pk, share  # type: ignore[attr-defined]  # an attribute the selector adds
        entry.shown = entry.amount  # type: ignore[attr-defined]  # an attribute the selector adds
        lease.hold_amount = share  # type: ignore[attr-defined]  # an attribute the selector adds to each instance
    for lease in by_key.values():
        if lease.hold_share is None:
            continue  # a hold of its own: its opening entry held what it shows
        mine = [e for e in entries if e.lease_id == lease.pk and e.kind == "hold"]
        extended = sum(e.amount for e in mine if e.key != lease.hold_key)
        for e in mine:
            if e.key == lease.hold_key:  # the tenant's opening entry: this lease's part of it
                e.shown = lease.hold_share - extended  # type: ignore[attr-defined]  # an attribute the selector adds
    return entries


LARGEST_GANG_CACHE_S = 30


def gpu_types_by_name() -> dict[str, GpuType]:
    return {t.name: t for t in GpuType.objects.all()}


def largest_gangs(*, gpu_types: Iterable[GpuType]) -> dict[int, int]:
    """GPU type id -> the largest gang that can ever be placed on that type (0 with no nodes).

    A gang that fits one node goes on one node, a larger one on whole nodes of one topology domain
    (ARCHITECTURE.md §Clearing step 5), so the limit is the GPUs of the type's nodes that are not down in its
    biggest domain. One grouped query.
    """
    from inventory.models import Gpu, Node

    ids = sorted(t.pk for t in gpu_types)
    key = "largest-gangs:" + ",".join(map(str, ids))
    cached = cache.get(key)
    if cached is not None:
        return dict(cached)
    groups = (
        Gpu.objects.filter(node__gpu_type_id__in=ids)
        .exclude(node__state__in=[Node.State.DOWN, Node.State.RETIRED])
        .filter(absent=False)
        .values_list("node__gpu_type_id", "node__topology_domain")
        .annotate(n=Count("pk"))
        .order_by()
    )
    largest = dict.fromkeys(ids, 0)
    for type_id, _domain, n in groups:
        largest[type_id] = max(largest[type_id], n)
    # The count scans every GPU of the types (2 ms at 8,000 GPUs, as much as a whole authenticated request),
    # and the cluster changes rarely: a node that just joined is counted within LARGEST_GANG_CACHE_S. A type
    # with no node yet is not cached: its first node must not leave every submit refused for that long.
    if all(largest.values()):
        cache.set(key, largest, LARGEST_GANG_CACHE_S)
    return largest
