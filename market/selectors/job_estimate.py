"""What a job will likely take and cost, and when it may start: the figures shown where people decide (the
submit form as they type, the job page, the API's job detail). docs/predictions.md."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from accounts.models import Tenant
from config.money import format_fixed
from inventory.models import GpuType
from market.models import LIVE_LEASE_STATES, Job, JobState, Lease
from market.selectors.guidance import bid_guidance
from market.selectors.predictions import (
    JobRuntime,
    history_for,
    hours,
    job_runtime,
    query_for,
    runtime_sentence,
)
from market.selectors.speed import SpeedGuide, speed_guide
from market.selectors.start_estimate import StartEstimate, start_estimates


@dataclass(frozen=True)
class Estimate:
    runtime: JobRuntime
    price: int | None  # micro-credits per GPU-hour the cost is figured at
    cost: int | None  # micro-credits for the predicted median (remaining) runtime
    cost_p90: int | None
    cost_text: str
    starts: list[StartEstimate]
    speeds: SpeedGuide | None = None  # per GPU type, against the first choice; None without a limit


_PAYS = {
    "G": "the reserve, within your team's guarantee",
    "B": "the posted price, as borrowed GPUs",
    "S": "at most the posted price, as spot GPUs",
}


def expected_price(*, tenant: Tenant, gpu_type: GpuType, limit: int, gpus: int) -> tuple[int, str] | None:
    """What a winning bid would likely pay per GPU-hour, and why: the reserve in its guarantee (tier G), the
    posted price as borrowed (B), at most its limit and the posted price as spot (S); None when it cannot win."""
    g = bid_guidance(tenant=tenant, gpu_type=gpu_type, limit=limit, gpus=gpus)
    price = {"G": g.reserve, "B": g.posted, "S": min(limit, g.posted)}.get(g.tier or "")
    if price is None or g.tier is None:
        return None
    why = f"{gpu_type.name}: {_PAYS[g.tier]}; your limit of {format_fixed(limit)} caps it"
    return price, why


def _cost(gpus: int, price: int, seconds: float) -> int:
    return int(gpus * price * seconds / 3600)


@dataclass(frozen=True)
class _Priced:
    price: int
    why: str
    gpu_type: str


def _priced(tenant: Tenant, gpus: int, limits: list[tuple[GpuType, int]]) -> _Priced | None:
    """The price a new win would likely pay on the most preferred type its limit can win, and why."""
    for gpu_type, limit in limits:
        found = expected_price(tenant=tenant, gpu_type=gpu_type, limit=limit, gpus=gpus)
        if found is not None:
            return _Priced(found[0], found[1], gpu_type.name)
    return None


def _runtimes(runtime: JobRuntime, speeds: SpeedGuide | None, gpu_type: str) -> tuple[float, float, str]:
    """The median and p90 runtime (still to go) to price on `gpu_type`: that type's own when its speed is
    known and the job has not started (the pooled prediction mixes every type's pace), else the pooled ones."""
    got = runtime.prediction
    assert got is not None
    row = speeds.on(gpu_type) if speeds is not None and runtime.done_s == 0 else None
    if row is None or row.runtime_s is None or row.runtime_p90_s is None:
        return got.remaining_median_s, got.remaining_p90_s, ""
    # Said only where it changes the figure: history on this type alone gives the pooled runtime back.
    differs = abs(row.runtime_s - got.median_s) > 0.01 * got.median_s
    note = f"; at {gpu_type}'s speed it runs about {hours(row.runtime_s)}" if differs else ""
    return row.runtime_s, row.runtime_p90_s, note


def _estimate(
    runtime: JobRuntime,
    gpus: int,
    priced: _Priced | None,
    starts: list[StartEstimate],
    speeds: SpeedGuide | None,
) -> Estimate:
    got = runtime.prediction
    if got is None or priced is None:
        text = (
            "" if got is None else "No cost estimate: none of the bid's limits can win (below the reserve)."
        )
        return Estimate(runtime, None, None, None, text, starts, speeds)
    median, p90_s, on_type = _runtimes(runtime, speeds, priced.gpu_type)
    cost, p90 = _cost(gpus, priced.price, median), _cost(gpus, priced.price, p90_s)
    more = " more" if runtime.done_s > 0 else ""
    text = (
        f"At {format_fixed(priced.price)} credits per GPU-hour ({priced.why}{on_type}) that is about "
        f"{format_fixed(cost)} credits{more} for {gpus} GPU{'s' if gpus != 1 else ''}; "
        f"{format_fixed(p90)} credits if it runs as long as the 90th percentile."
    )
    return Estimate(runtime, priced.price, cost, p90, text, starts, speeds)


def draft_estimate(
    *, tenant: Tenant, name: str, command: str, gpus: int, limits: list[tuple[GpuType, int]]
) -> Estimate:
    """For a job being typed in the submit form (not saved): its prediction, cost and start per type."""
    history = history_for(tenant=tenant)
    got = history.predict(query_for(tenant=tenant, name=name, command=command, gpus=gpus))
    runtime = JobRuntime(got, 0.0, runtime_sentence(got))
    starts = start_estimates(tenant=tenant, limits=limits, gpus=gpus)
    speeds = _speeds(tenant, name, command, gpus, limits)
    return _estimate(runtime, gpus, _priced(tenant, gpus, limits), starts, speeds)


def _speeds(
    tenant: Tenant, name: str, command: str, gpus: int, limits: list[tuple[GpuType, int]]
) -> SpeedGuide | None:
    """Speeds against the first choice at its limit: the limit the member would convert to other types."""
    if not limits:
        return None
    reference, limit = limits[0]
    return speed_guide(
        tenant=tenant, name=name, command=command, gpus=gpus, reference=reference, reference_limit=limit
    )


def job_estimate(*, job: Job, now: datetime | None = None) -> Estimate:
    """For a saved job: prediction from the work done; start estimates while it is pending."""
    now = now or timezone.now()
    types = {t.name: t for t in GpuType.objects.all()}
    limits = [(types[e["gpu_type"]], int(e["limit"])) for e in job.limits if e["gpu_type"] in types]
    runtime = job_runtime(job=job, now=now)
    starts = (
        start_estimates(
            tenant=job.tenant,
            limits=limits,
            gpus=job.gpus,
            submitted_at=job.submitted_at,
            job_id=job.pk,
            now=now,
        )
        if job.state == JobState.PENDING
        else []
    )
    live = Lease.objects.filter(job=job, state__in=LIVE_LEASE_STATES).select_related("gpu_type").first()
    # A running job pays its lease's price; a waiting one what a new win would likely pay.
    priced = (
        _Priced(live.price, f"its lease's price on {live.gpu_type.name}", live.gpu_type.name)
        if live
        else _priced(job.tenant, job.gpus, limits)
    )
    speeds = _speeds(job.tenant, job.name, job.command, job.gpus, limits)
    return _estimate(runtime, job.gpus, priced, starts, speeds)


def max_hours_warning(found: Estimate, max_hours: float, shown: str | None = None) -> str:
    """Max hours below what 90% of similar jobs needed: the job would likely be stopped before it ends.
    `shown`: the max hours as the user typed them (the portal echoes its field), else `max_hours` as text."""
    got = found.runtime.prediction
    if got is None or not 0 < max_hours < got.p90_s / 3600:
        return ""
    return (
        f"Max hours {shown if shown is not None else f'{max_hours:g}'} is less than the {hours(got.p90_s)} "
        "within which 90% of similar jobs finished: this job would likely be stopped at its max hours before "
        "it ends."
    )
