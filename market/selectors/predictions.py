"""Runtime predictions for jobs, fed from the database (the model: allocator/predict.py; docs/predictions.md).

A finished job's runtime is what the node agents measured: each lease's GPU-seconds (LeaseUsage,
summed over the gang's nodes) divided by its GPUs, summed over the job's leases; a lease without any usage
report counts from the agent's start report to its end (`running_at` to `ended_at`). Only COMPLETED jobs are
history: a failed, cancelled or expired run says how long the job was allowed, not how long it needed.

The samples (the newest finished jobs of the tenant, and of everybody for the widest match) are cached for
CACHE_SECONDS: a job finishing now shows in predictions within that long.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.db.models import Sum
from django.utils import timezone

from accounts.models import Tenant
from allocator.predict import (
    Finished,
    Prediction,
    Query,
    RuntimeHistory,
    command_family,
    name_family,
)
from market import bulk
from market.models import Job, JobState, Lease, LeaseState

# How many of the newest finished jobs each sample keeps (the predictor's window is smaller per key).
SAMPLE_JOBS = 2000
CACHE_SECONDS = 60
_CACHE_KEY = "predict:finished:v2:{}"  # v2: with the GPU type a job ran on


def lease_seconds(
    lease_rows: list[tuple[int, int, float | None, datetime | None, datetime | None]],
) -> dict[int, float]:
    """Per job: the seconds its leases ran, from (job, gpus, measured GPU-seconds, running_at, ended_at)."""
    out: dict[int, float] = defaultdict(float)
    for job_id, gpus, gpu_seconds, running_at, ended_at in lease_rows:
        if gpu_seconds:
            out[job_id] += float(gpu_seconds) / max(gpus, 1)
        elif running_at is not None and ended_at is not None:
            out[job_id] += max((ended_at - running_at).total_seconds(), 0.0)
    return out


def _sample(tenant_id: int | None) -> list[Finished]:
    """The newest COMPLETED jobs (of one tenant, or of all when None) with measured runtimes, oldest first."""
    jobs = Job.objects.filter(state=JobState.COMPLETED, ended_at__isnull=False)
    if tenant_id is not None:
        jobs = jobs.filter(tenant_id=tenant_id)
    rows = list(
        jobs.order_by("-ended_at", "-pk").values_list(
            "pk", "tenant__slug", "name", "command", "gpus", "ended_at"
        )[:SAMPLE_JOBS]
    )
    leases = list(
        Lease.objects.filter(job_id__in=[r[0] for r in rows], state=LeaseState.ENDED)
        .annotate(measured=Sum("usage__gpu_seconds"))
        .values_list("job_id", "gpus", "measured", "running_at", "ended_at", "gpu_type__name")
    )
    seconds = lease_seconds([row[:5] for row in leases])
    types = single_types([(row[0], row[5]) for row in leases])
    return [
        Finished(
            slug,
            name_family(name),
            command_family(command),
            gpus,
            seconds[pk],
            ended.timestamp(),
            types.get(pk, ""),
        )
        for pk, slug, name, command, gpus, ended in reversed(rows)
        if seconds.get(pk, 0) > 0 and ended is not None  # never None: filtered above, typed nullable
    ]


def single_types(job_types: list[tuple[int, str]]) -> dict[int, str]:
    """Per job, the one GPU type all its leases ran on; a job whose leases ran on several types is left out
    (its runtime is a blend of their speeds, allocator/speed.py)."""
    seen: dict[int, set[str]] = defaultdict(set)
    for job_id, name in job_types:
        seen[job_id].add(name)
    return {job_id: names.pop() for job_id, names in seen.items() if len(names) == 1}


def finished_sample(tenant_id: int | None) -> list[Finished]:
    """The newest finished jobs of a tenant (or of everybody: None), cached for CACHE_SECONDS."""
    key = _CACHE_KEY.format("all" if tenant_id is None else tenant_id)
    found = cache.get(key)
    if found is None:
        found = _sample(tenant_id)
        cache.set(key, found, CACHE_SECONDS)
    return list(found)


def history_for(*, tenant: Tenant) -> RuntimeHistory:
    """The tenant's own finished jobs at every level, everybody's at the widest (same GPU count)."""
    own = finished_sample(tenant.pk)
    others = [f for f in finished_sample(None) if f.tenant != tenant.slug]
    history = RuntimeHistory()
    for job in sorted(own + others, key=lambda f: f.ended_at):
        history.add(job)
    return history


def query_for(*, tenant: Tenant, name: str, command: str, gpus: int) -> Query:
    return Query(tenant.slug, name_family(name), command_family(command), gpus)


def done_seconds(*, job_ids: list[int]) -> dict[int, float]:
    """Work already done by pending jobs (a preempted or moved one ran before): their ended leases, as
    measured. One query over the ids given (any number: bulk.any_of)."""
    rows = (
        Lease.objects.filter(job_id__in=bulk.any_of(job_ids), state=LeaseState.ENDED)
        .annotate(measured=Sum("usage__gpu_seconds"))
        .values_list("job_id", "gpus", "measured", "running_at", "ended_at")
    )
    return lease_seconds(list(rows))


def job_done_seconds(*, job: Job, now: datetime | None = None) -> float:
    """Seconds of work the job has done: its ended leases as measured, plus the live one so far."""
    now = now or timezone.now()
    rows = Lease.objects.filter(job=job).annotate(measured=Sum("usage__gpu_seconds"))
    done = 0.0
    for gpus, measured, running_at, ended_at, state in rows.values_list(
        "gpus", "measured", "running_at", "ended_at", "state"
    ):
        if state == LeaseState.ENDED:
            done += lease_seconds([(0, gpus, measured, running_at, ended_at)]).get(0, 0.0)
        elif running_at is not None:
            # A running lease: wall time since the agent started it (its reports lag by up to a minute).
            done += max((now - running_at).total_seconds(), float(measured or 0) / max(gpus, 1))
    return done


@dataclass(frozen=True)
class JobRuntime:
    """A job's prediction (None at cold start) and the work it has done; `text` says it for people."""

    prediction: Prediction | None
    done_s: float
    text: str


def job_runtime(
    *, job: Job, history: RuntimeHistory | None = None, now: datetime | None = None
) -> JobRuntime:
    """Predicted runtime of a pending or running job; a finished one gets none (it has its real runtime)."""
    if job.state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED):
        return JobRuntime(None, 0.0, "The job has ended; no prediction.")
    history = history or history_for(tenant=job.tenant)
    done = job_done_seconds(job=job, now=now)
    got = history.predict(
        query_for(tenant=job.tenant, name=job.name, command=job.command, gpus=job.gpus), done
    )
    return JobRuntime(got, done, runtime_sentence(got, done))


def hours(seconds: float) -> str:
    """A duration for people: minutes under an hour and a half, else hours with one decimal."""
    if seconds < 5400:
        minutes = max(round(seconds / 60), 1)
        return f"{minutes} min"
    return f"{seconds / 3600:.1f} h"


def runtime_sentence(got: Prediction | None, done_s: float = 0.0) -> str:
    if got is None:
        if done_s > 0:
            return (
                f"No prediction: it has run {hours(done_s)}, and too few similar finished jobs ran longer "
                "than that to predict from."
            )
        return "No prediction yet: too few similar jobs have finished (cold start)."
    basis = f"median of {got.basis} jobs, {got.level_name}"
    if done_s > 0:
        return (
            f"About {hours(got.remaining_median_s)} more (90% finish within {hours(got.remaining_p90_s)} "
            f"more); it has run {hours(done_s)}. Jobs like this that ran that long took {hours(got.median_s)} "
            f"({basis})."
        )
    return f"Jobs like this ran {hours(got.median_s)} ({basis}); 90% finished within {hours(got.p90_s)}."


@dataclass(frozen=True)
class BookLease:
    """What the frozen book needs of a live lease to expect its end (market.selectors.book)."""

    slug: str
    name: str
    command: str
    gpus: int
    started: datetime
    running: datetime | None
    max_s: int


def book_history() -> tuple[RuntimeHistory, bool]:
    """Everybody's newest finished jobs (cached), as the frozen book and the estimated starts predict from,
    and whether there are none (then nothing can be predicted: the freeze skips the work)."""
    history = RuntimeHistory()
    sample = finished_sample(None)
    for job in sample:
        history.add(job)
    return history, not sample


def expected_ends(*, leases: list[BookLease], now: datetime, history: RuntimeHistory) -> list[int]:
    """Per live lease, when it is expected to end (epoch seconds): now plus its job's predicted remaining
    runtime (the median of similar jobs that ran longer than it has so far), bounded by its start plus max
    hours; without a prediction, its start plus max hours (docs/rounds.md §Reservations)."""
    t = now.timestamp()
    out = []
    for lease in leases:
        hard = int(lease.started.timestamp()) + lease.max_s
        done = max(t - (lease.running or lease.started).timestamp(), 0.0)
        got = history.predict(
            Query(lease.slug, name_family(lease.name), command_family(lease.command), lease.gpus), done
        )
        out.append(hard if got is None else min(int(t + got.remaining_median_s), hard))
    return out


def expected_runtimes(
    *, jobs: list[tuple[str, str, str, int, float, int]], history: RuntimeHistory, empty: bool = False
) -> list[int]:
    """Per pending job (tenant slug, name, command, GPUs, seconds already done, max seconds): the runtime
    expected of its next lease, its predicted remaining median, at least 1 s and at most max seconds; max
    seconds without a prediction (and for every job when the history is ``empty``: no finished job yet). The
    freeze calls it for every pending job, so names, commands and predictions are each worked out once per
    distinct value (a tenant's sweep shares its command and its name family)."""
    if empty:
        return [job[5] for job in jobs]
    names: dict[str, str] = {}
    commands: dict[str, str] = {}
    seen: dict[tuple[str, str, str, int, float], Prediction | None] = {}
    out = []
    for slug, name, command, gpus, done, max_s in jobs:
        nf = names.get(name)
        if nf is None:
            nf = names[name] = name_family(name)
        cf = commands.get(command)
        if cf is None:
            cf = commands[command] = command_family(command)
        key = (slug, nf, cf, gpus, done)
        if key in seen:
            got = seen[key]
        else:
            got = seen[key] = history.predict(Query(slug, nf, cf, gpus), done)
        out.append(max_s if got is None else max(min(math.ceil(got.remaining_median_s), max_s), 1))
    return out
