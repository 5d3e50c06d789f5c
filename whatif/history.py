"""Reads the platform's own history into a Trace (whatif.trace) for one window of submit times.

What each field is taken from (docs/whatif.md has the table):
- pools: nodes of each GPU type that existed during the window (not retired before it), GPUs not absent;
- tenants: today's weights and guarantees (the audit log has the past ones, the rounds did not freeze them);
  budget = the tenant's balance when the window began plus the top-ups and refunds credited during it;
- jobs: those submitted in the window, at their real submit time (kept across preemption), gang size, the
  current bid's types (best first) and the limit of the first; runtime = the GPU-seconds the agents measured
  over all of the job's leases divided by its GPUs (a lease without usage reports: its wall-clock time).
  A job that never ran and never will (cancelled, expired, failed before a lease) is left out: it used no
  GPU and nobody knows how long it would have run. A job still pending at export is kept with its
  `max_seconds` as runtime, a running one with what it measured so far; the notes count both.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.db.models import Min, Q, Sum
from django.utils import timezone

from accounts.models import Tenant
from inventory.models import Gpu, GpuType, Node
from market.models import (
    TERMINAL_STATES,
    AccountKind,
    EndReason,
    EntryKind,
    Guarantee,
    Job,
    JobState,
    Lease,
    LeaseUsage,
    Posting,
)
from market.selectors.policy import market_policy
from whatif.trace import Trace, TraceJob, TracePool, TraceTenant

TRACE_NAME = "gpumarket-history"


class HistoryError(ValueError):
    """The window cannot become a scenario (no nodes in it, ...); the message says why."""


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime


def _pools(window: Window) -> tuple[TracePool, ...]:
    """One pool per GPU type with nodes in the window. The format wants equal nodes per pool: where the
    platform's differ, the pool keeps the largest node (so every gang that fit a node still fits one) and
    as many of them as hold the type's GPUs, rounded down (never more capacity than there was)."""
    nodes = Node.objects.filter(created_at__lt=window.until).filter(
        Q(retired_at__isnull=True) | Q(retired_at__gte=window.since)
    )
    sizes: dict[str, list[int]] = defaultdict(list)
    counts = Counter(
        Gpu.objects.filter(node__in=nodes, absent=False).values_list("node_id", flat=True).iterator()
    )
    for node_id, type_name in nodes.values_list("pk", "gpu_type__name").order_by("gpu_type__name", "name"):
        if counts[node_id]:
            sizes[type_name].append(counts[node_id])
    pools = []
    for type_name, per_node in sorted(sizes.items()):
        if "|" in type_name:
            raise HistoryError(f"GPU type {type_name!r} has a '|', which the scenario format cannot name")
        widest = max(per_node)
        pools.append(TracePool(type_name, max(sum(per_node) // widest, 1), widest))
    if not pools:
        raise HistoryError("no GPU nodes existed in this window: there is no cluster to replay on")
    return tuple(pools)


def _budgets(window: Window, tenants: list[Tenant]) -> dict[int, int]:
    """Micro-credits each tenant could spend over the window (see the module docstring)."""
    mine = Posting.objects.filter(
        account__tenant__in=tenants, account__kind__in=[AccountKind.AVAILABLE, AccountKind.HELD]
    )
    opening = mine.filter(entry__created_at__lt=window.since)
    inflow = mine.filter(
        entry__created_at__gte=window.since,
        entry__created_at__lt=window.until,
        entry__kind__in=[EntryKind.TOPUP, EntryKind.REFUND],
        amount__gt=0,
    )
    budget: dict[int, int] = defaultdict(int)
    for qs in (opening, inflow):
        for tenant_id, total in qs.values_list("account__tenant").annotate(total=Sum("amount")):
            budget[tenant_id] += int(total)
    return {t.pk: max(budget[t.pk], 0) for t in tenants}


def _tenants(jobs: list[Job]) -> list[Tenant]:
    with_jobs = {job.tenant_id for job in jobs}
    return list(Tenant.objects.filter(Q(active=True) | Q(pk__in=with_jobs)).order_by("slug"))


def _trace_tenants(window: Window, tenants: list[Tenant], pools: tuple[TracePool, ...]) -> list[TraceTenant]:
    types = {p.gpu_type for p in pools}
    guarantees: dict[int, dict[str, int]] = defaultdict(dict)
    rows = Guarantee.objects.filter(tenant__in=tenants, gpu_type__name__in=types, gpus__gt=0)
    for tenant_id, type_name, gpus in rows.values_list("tenant_id", "gpu_type__name", "gpus"):
        guarantees[tenant_id][type_name] = gpus
    budgets = _budgets(window, tenants)
    out = [
        TraceTenant(t.slug, dict(sorted(guarantees[t.pk].items())), t.weight, budgets[t.pk]) for t in tenants
    ]
    for pool in pools:
        total = sum(t.guaranteed.get(pool.gpu_type, 0) for t in out)
        if total > pool.nodes * pool.gpus_per_node:
            raise HistoryError(
                f"today's guarantees of {pool.gpu_type} add up to {total} GPUs, more than the "
                f"{pool.nodes * pool.gpus_per_node} its nodes had in this window"
            )
    return out


def _measured_seconds(jobs: list[Job], now: datetime) -> dict[int, int]:
    """Seconds each job ran, from the agents' GPU-seconds (per lease, over its GPUs)."""
    leases = list(
        Lease.objects.filter(job__in=jobs).only(
            "pk", "job_id", "gpus", "started_at", "running_at", "ended_at"
        )
    )
    measured = dict(
        LeaseUsage.objects.filter(lease__in=leases).values_list("lease_id").annotate(total=Sum("gpu_seconds"))
    )
    seconds: dict[int, float] = defaultdict(float)
    for lease in leases:
        if lease.pk in measured:
            seconds[lease.job_id] += float(measured[lease.pk]) / max(lease.gpus, 1)
        else:
            start = lease.running_at or lease.started_at
            seconds[lease.job_id] += max(((lease.ended_at or now) - start).total_seconds(), 0.0)
    return {job_id: math.ceil(s) for job_id, s in seconds.items()}


def _job_row(job: Job, window: Window, seconds: dict[int, int], known: set[str]) -> TraceJob:
    limits = [row for row in job.limits if isinstance(row, dict)]
    duration = seconds.get(job.pk, job.max_seconds)
    return TraceJob(
        job_id=f"job-{job.pk}",
        submit_s=max(int((job.submitted_at - window.since).total_seconds()), 0),
        tenant=job.tenant.slug,
        gpus=job.gpus,
        duration_s=duration,
        gpu_types=tuple(str(row["gpu_type"]) for row in limits if str(row["gpu_type"]) in known)
        or tuple(str(row["gpu_type"]) for row in limits),
        price_micro=int(limits[0]["limit"]) if limits else None,
    )


def _jobs(window: Window) -> list[Job]:
    return list(
        Job.objects.filter(submitted_at__gte=window.since, submitted_at__lt=window.until)
        .select_related("tenant")
        .order_by("submitted_at", "pk")
    )


def jobs_in_window(window: Window) -> int:
    """How many jobs were submitted in the window (the console says so when there are none)."""
    return Job.objects.filter(submitted_at__gte=window.since, submitted_at__lt=window.until).count()


def history_trace(window: Window, *, now: datetime | None = None) -> Trace:
    """The window's history as a Trace; HistoryError when it cannot be one."""
    if window.until <= window.since:
        raise HistoryError("the window must end after it begins")
    now = now or timezone.now()
    pools = _pools(window)
    jobs = _jobs(window)
    seconds = _measured_seconds(jobs, now)
    ran = [j for j in jobs if j.pk in seconds or j.state not in TERMINAL_STATES]
    known = {p.gpu_type for p in pools}
    tenants = _tenants(ran)
    policy = market_policy()
    pending = sum(1 for j in ran if j.pk not in seconds)
    running = sum(1 for j in ran if j.state in (JobState.RUNNING, JobState.ALLOCATED, JobState.PREEMPTING))
    notes = [
        f"gpumarket history, jobs submitted from {window.since.isoformat()} to {window.until.isoformat()}",
        f"{len(ran)} jobs; {len(jobs) - len(ran)} left out (ended without running)",
        f"{pending} never ran before the export: runtime = their max_seconds",
        f"{running} still running at the export: runtime = measured so far",
        "guarantees and weights are today's; price = the limit of each job's first GPU type",
    ]
    return Trace(
        name=TRACE_NAME,
        round_s=policy.round_seconds,
        pools=pools,
        tenants=tuple(_trace_tenants(window, tenants, pools)),
        reserve_micro={
            t.name: t.reserve_price for t in GpuType.objects.filter(name__in=known).order_by("name")
        },
        jobs=tuple(_job_row(j, window, seconds, known) for j in ran),
        notes=tuple(notes),
    )


def actual_figures(window: Window) -> dict[str, float | int | None]:
    """What really happened to the window's jobs, for the figures a replay can be checked against: jobs
    completed, queueing delay (submit to first lease), preemptions, spend (credits charged to their leases)."""
    jobs = Job.objects.filter(submitted_at__gte=window.since, submitted_at__lt=window.until)
    submitted = dict(jobs.values_list("pk", "submitted_at"))
    leases = Lease.objects.filter(job__in=jobs)
    first = leases.values("job_id").annotate(first=Min("started_at")).values_list("job_id", "first")
    delays = np.array(
        [max((start - submitted[job]).total_seconds(), 0.0) for job, start in first], dtype=np.float64
    )
    charged = leases.aggregate(total=Sum("charged"))["total"] or 0

    def stat(q: float | None) -> float | None:
        if not len(delays):
            return None
        return round(float(delays.mean() if q is None else np.percentile(delays, q)), 1)

    return {
        "completed": jobs.filter(state=JobState.COMPLETED).count(),
        "avg_queue_s": stat(None),
        "p50_queue_s": stat(50),
        "p95_queue_s": stat(95),
        "preemptions": leases.filter(end_reason=EndReason.PREEMPTED).count(),
        "spend": round(int(charged) / 1_000_000, 2),
    }
