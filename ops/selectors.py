"""Reads behind the metrics and the readiness check: market-wide figures, a few aggregate queries each.

Every function here runs at scrape time, so each is one query (or two) whatever the number of jobs, and none
loads a round's book.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import BigIntegerField, Count, Exists, F, Func, OuterRef, Q, Sum, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce

from inventory.models import Gpu, Node
from market.models import (
    LIVE_LEASE_STATES,
    Account,
    Guarantee,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    PreemptReason,
    Round,
    RoundState,
)

# Upper bounds, seconds, of the round step histograms (a round of 20,000 jobs takes about a second).
ROUND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
ROUND_STEPS = ("round", "freeze", "clear", "commit")


@dataclass(frozen=True)
class StepHistogram:
    """Cumulative counts per bucket bound (seconds), the observation count and their sum (seconds)."""

    buckets: list[tuple[float, int]]
    count: int
    total_s: float


@dataclass(frozen=True)
class RoundTotals:
    by_state: dict[str, int]
    winners: int
    bids: int
    gpus_allocated: int
    last_done_at: datetime | None
    last_id: int | None


def round_totals() -> RoundTotals:
    by_state = dict(Round.objects.values_list("state").annotate(n=Count("pk")).order_by())
    sums = Round.objects.aggregate(
        winners=Coalesce(Sum("winners"), 0),
        bids=Coalesce(Sum("bids"), 0),
        gpus_allocated=Coalesce(Sum("gpus_allocated"), 0),
    )
    last = (
        Round.objects.filter(state=RoundState.DISPATCHED)
        .order_by("-dispatched_at")
        .values_list("pk", "dispatched_at")
        .first()
    )
    return RoundTotals(
        by_state={str(k): int(v) for k, v in by_state.items()},
        last_done_at=last[1] if last else None,
        last_id=last[0] if last else None,
        **{k: int(v) for k, v in sums.items()},
    )


def preemptions_by_reason() -> dict[str, int]:
    """Leases rounds preempted, by the allocator's rule (every rule, 0 where none): one count over the partial
    index of preempted leases (market.Lease.preempt_reason). Leases preempted before the rule was recorded
    are not counted."""
    counted = dict(
        Lease.objects.exclude(preempt_reason="")
        .values_list("preempt_reason")
        .annotate(n=Count("*"))
        .order_by()
    )
    return {reason: int(counted.get(reason, 0)) for reason in PreemptReason.values}


@dataclass(frozen=True)
class Reservations:
    """Totals behind the reservation, backfill and move metrics (docs/rounds.md §Reservations and backfill)."""

    reserved_idle_gpu_s: float  # per round: idle GPUs on reserved nodes x the round's length
    backfilled_gpu_s: float  # GPU-seconds backfilled leases ran (ended: to their end; live: until now)
    moves: int  # moved leases placed again (a new lease with moved_from)
    moved_lost_gpu_s: float  # work the moves threw away (the moved leases' lost_gpu_s)


def reservation_totals(now: datetime) -> Reservations:
    """Four aggregate queries. Reserved-idle comes from each committed round's counters (the allocator's
    ``reserved_idle_gpus``) times its period; backfilled GPU-seconds and moves from the leases themselves."""
    idle = Round.objects.filter(committed_at__isnull=False).aggregate(
        s=Coalesce(
            Sum(Cast(KeyTextTransform("reserved_idle_gpus", "counters"), BigIntegerField()) * F("period_s")),
            0,
        )
    )["s"]
    ran = Coalesce(F("ended_at"), Value(now)) - F("running_at")
    backfilled = (
        Lease.objects.filter(backfill=True, running_at__isnull=False)
        .annotate(ran=ran)
        .values_list("gpus", "ran")
    )
    moved = Lease.objects.filter(preempt_reason=PreemptReason.MOVED).aggregate(
        lost=Coalesce(Sum("lost_gpu_s"), 0.0)
    )["lost"]
    return Reservations(
        reserved_idle_gpu_s=float(idle or 0),
        backfilled_gpu_s=sum(gpus * max(r.total_seconds(), 0.0) for gpus, r in backfilled),
        moves=Lease.objects.filter(moved_from__isnull=False).count(),
        moved_lost_gpu_s=float(moved or 0.0),
    )


def round_step_histograms() -> dict[str, StepHistogram]:
    """Histograms of each step's time over every round that finished its steps, in one aggregate query.

    A round's own duration is its freeze, clear and commit added up: the work, without the time its task
    waited in the queue."""
    done = Round.objects.filter(commit_ms__isnull=False, clear_ms__isnull=False, freeze_ms__isnull=False)
    annotated = done.annotate(
        _round=F("freeze_ms") + F("clear_ms") + F("commit_ms"),
        _freeze=F("freeze_ms"),
        _clear=F("clear_ms"),
        _commit=F("commit_ms"),
    )
    aggs: dict[str, Func] = {"n": Count("pk")}
    for step in ROUND_STEPS:
        aggs[f"{step}_sum"] = Coalesce(Sum(f"_{step}"), 0)
        for i, bound in enumerate(ROUND_BUCKETS):
            aggs[f"{step}_b{i}"] = Count("pk", filter=Q(**{f"_{step}__lte": round(bound * 1000)}))
    row = annotated.aggregate(**aggs)
    return {
        step: StepHistogram(
            buckets=[(bound, int(row[f"{step}_b{i}"])) for i, bound in enumerate(ROUND_BUCKETS)],
            count=int(row["n"]),
            total_s=int(row[f"{step}_sum"]) / 1000,
        )
        for step in ROUND_STEPS
    }


def gpus_by_state() -> dict[tuple[str, str], int]:
    """{(type, state): GPUs}: `busy` (bound to a live lease) or `free` on nodes that are up, else the node's
    own state (down, draining, ...)."""
    bound = LeaseGpu.objects.filter(gpu=OuterRef("pk"), active=True)
    rows = (
        Gpu.objects.annotate(busy=Exists(bound))
        .values_list("node__gpu_type__name", "node__state", "busy")
        .annotate(n=Count("pk"))
        .order_by()
    )
    out: dict[tuple[str, str], int] = defaultdict(int)
    for type_name, node_state, busy, n in rows:
        up = node_state == Node.State.UP
        out[type_name, ("busy" if busy else "free") if up else str(node_state)] += int(n)
    return dict(out)


def pending_demand() -> dict[str, tuple[int, int]]:
    """{type: (jobs, GPUs)} over pending jobs that bid for the type; a job bidding for two types counts in
    both (it is demand for either)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for gpus, limits in (
        Job.objects.filter(state=JobState.PENDING).values_list("gpus", "limits").iterator(2000)
    ):
        for name in {bid["gpu_type"] for bid in limits}:
            out[name][0] += 1
            out[name][1] += gpus
    return {name: (jobs, gpus) for name, (jobs, gpus) in out.items()}


def tenant_gpus() -> dict[tuple[str, str, str], int]:
    """{(tenant, type, tier): GPUs} of live leases."""
    rows = (
        Lease.objects.filter(state__in=LIVE_LEASE_STATES)
        .values_list("tenant__slug", "gpu_type__name", "tier")
        .annotate(n=Sum("gpus"))
        .order_by()
    )
    return {(t, g, tier): int(n) for t, g, tier, n in rows}


@dataclass(frozen=True)
class GuaranteeRow:
    tenant: str
    gpu_type: str
    guaranteed: int
    held: int
    wants: bool  # has pending demand for the type, or holds GPUs of it

    @property
    def compliance(self) -> float:
        """1 when the guarantee is met or not wanted; else the share of it the tenant holds."""
        if not self.wants or self.guaranteed == 0:
            return 1.0
        return min(self.held, self.guaranteed) / self.guaranteed


def guarantees(
    held: dict[tuple[str, str, str], int], demand_by_tenant: set[tuple[str, str]]
) -> list[GuaranteeRow]:
    per_type: dict[tuple[str, str], int] = defaultdict(int)
    for (tenant, gpu_type, _tier), n in held.items():
        per_type[tenant, gpu_type] += n
    rows = Guarantee.objects.filter(gpus__gt=0).values_list("tenant__slug", "gpu_type__name", "gpus")
    return [
        GuaranteeRow(
            tenant=t,
            gpu_type=g,
            guaranteed=int(q),
            held=per_type.get((t, g), 0),
            wants=(t, g) in demand_by_tenant or per_type.get((t, g), 0) > 0,
        )
        for t, g, q in rows
    ]


def tenant_pending_types() -> set[tuple[str, str]]:
    """(tenant, type) pairs with a pending job bidding for the type."""
    out: set[tuple[str, str]] = set()
    for slug, limits in (
        Job.objects.filter(state=JobState.PENDING).values_list("tenant__slug", "limits").iterator(2000)
    ):
        out.update((slug, bid["gpu_type"]) for bid in limits)
    return out


def ledger_totals() -> dict[str, int]:
    """{account kind: micro-credits}, summed over tenants for their kinds (available, held); the platform's
    kinds (revenue, top-up) have one account each."""
    rows = Account.objects.values_list("kind").annotate(total=Sum("balance")).order_by()
    return {kind: int(total or 0) for kind, total in rows}


def node_heartbeats() -> dict[str, datetime | None]:
    """{node: last heartbeat} of the nodes an agent runs (retired ones have none to watch)."""
    return dict(Node.objects.exclude(state=Node.State.RETIRED).values_list("name", "last_heartbeat"))
