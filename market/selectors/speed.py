"""Speed-aware guidance: per GPU type, how fast a job like this one runs there, what that takes and costs, and
the limit that pays the same per unit of work as the member's limit on their first choice
(docs/predictions.md §Speed per GPU type; the estimator is allocator/speed.py, shared with the simulator).

The history is the one predictions use (market.selectors.predictions: measured runtimes of COMPLETED jobs,
cached), each job tagged with the one GPU type its leases ran on.
"""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import Tenant
from allocator.speed import Factor, SpeedHistory, Speeds, limit_for_same_work
from config.money import format_fixed
from inventory.models import GpuType
from market.selectors.predictions import finished_sample, hours, query_for


@dataclass(frozen=True)
class TypeSpeed:
    """One GPU type for one job. Money in micro-credits per GPU-hour (prices, limits) or micro-credits
    (cost); None where the speed or the runtime is unknown."""

    gpu_type: str
    factor: Factor
    runtime_s: float | None
    runtime_p90_s: float | None
    posted: int
    cost: int | None  # GPUs x the estimated runtime x the posted price
    suggested_limit: int | None
    limit_clipped: str | None  # "reserve" or "max" when the same-work limit fell outside the type's bounds
    text: str


@dataclass(frozen=True)
class SpeedGuide:
    reference: str  # the member's first choice, against which speeds are given
    reference_limit: int
    reference_median_s: float | None
    median_basis: int
    rows: list[TypeSpeed]
    text: str

    def on(self, gpu_type: str) -> TypeSpeed | None:
        return next((r for r in self.rows if r.gpu_type == gpu_type), None)


def speed_history_for(*, tenant: Tenant) -> SpeedHistory:
    """The tenant's finished jobs at every level, everybody's at the widest, like history_for."""
    own = finished_sample(tenant.pk)
    others = [f for f in finished_sample(None) if f.tenant != tenant.slug]
    history = SpeedHistory()
    for job in sorted(own + others, key=lambda f: f.ended_at):
        history.add(job)
    return history


def _basis(f: Factor, reference: str) -> str:
    low, high = f.interval or (0.0, 0.0)
    if f.via is not None:
        return (
            f"through {f.via}, which ran beside both: {f.runs} runs on {f.gpu_type} compared with {f.via}, and "
            f"{f.via} with {f.reference_runs} on {reference}; {f.confidence} confidence, 90% between "
            f"{low:.2f}x and {high:.2f}x"
        )
    return (
        f"from {f.runs} runs on {f.gpu_type} and {f.reference_runs} on {reference} in {f.strata} "
        f"group{'s' if f.strata != 1 else ''} of similar jobs ({f.level_name}); {f.confidence} confidence, "
        f"90% between {low:.2f}x and {high:.2f}x"
    )


def _limit_text(
    gpu_type: GpuType, limit: int, clipped: str | None, reference: str, reference_limit: int
) -> str:
    same = (
        f"For the same cost per unit of work as your limit of {format_fixed(reference_limit)} on {reference}"
    )
    if clipped == "reserve":
        return f"{same}, bid its reserve {format_fixed(limit)} (the same-work limit is below it)."
    if clipped == "max":
        return f"{same}, bid its maximum {format_fixed(limit)} (the same-work limit is above it)."
    return f"{same}, bid {format_fixed(limit)}."


def _row(gpu_type: GpuType, speeds: Speeds, gpus: int, reference: str, reference_limit: int) -> TypeSpeed:
    f = speeds.factors[gpu_type.name]
    posted = gpu_type.current_posted
    if f.factor is None:
        text = (
            f"Cold start: too few similar jobs have run on both {gpu_type.name} and {reference} to compare "
            "their speeds."
        )
        return TypeSpeed(gpu_type.name, f, None, None, posted, None, None, None, text)
    runtime = speeds.runtime_s(gpu_type.name)
    # Rounded, not floored: the runtime went through logarithms and may sit a hair below a whole second.
    cost = None if runtime is None else round(gpus * posted * runtime / 3600)
    limit, clipped = limit_for_same_work(
        reference_limit, f.factor, gpu_type.reserve_price, gpu_type.max_price
    )
    if gpu_type.name == reference:
        parts = [f"{reference}: your first choice, the reference (1.00x)."]
    else:
        parts = [f"{f.factor:.2f}x the speed of {reference} ({_basis(f, reference)})."]
    if runtime is not None and cost is not None:
        parts.append(
            f"About {hours(runtime)}, {format_fixed(cost)} credits at the posted price {format_fixed(posted)}."
        )
    if gpu_type.name != reference:
        parts.append(_limit_text(gpu_type, limit, clipped, reference, reference_limit))
    p90 = speeds.runtime_p90_s(gpu_type.name)
    return TypeSpeed(gpu_type.name, f, runtime, p90, posted, cost, limit, clipped, " ".join(parts))


def speed_guide(
    *,
    tenant: Tenant,
    name: str,
    command: str,
    gpus: int,
    reference: GpuType,
    reference_limit: int,
    history: SpeedHistory | None = None,
) -> SpeedGuide:
    """Every GPU type's speed, runtime, cost and same-work limit for a job like this, against `reference`
    (the member's first choice) bid at `reference_limit`."""
    types = list(GpuType.objects.order_by("name"))
    history = history or speed_history_for(tenant=tenant)
    speeds = history.speeds(
        query_for(tenant=tenant, name=name, command=command, gpus=gpus),
        [t.name for t in types],
        reference.name,
    )
    rows = [_row(t, speeds, gpus, reference.name, reference_limit) for t in types]
    known = sum(1 for r in rows if r.factor.factor is not None and r.gpu_type != reference.name)
    if speeds.reference_median_s is None:
        text = (
            f"No runtime estimate per type yet: too few similar jobs have finished on {reference.name} or on "
            "a type compared with it (cold start)."
        )
    else:
        others = len(rows) - 1
        text = (
            f"On {reference.name}, jobs like this take about {hours(speeds.reference_median_s)} (median of "
            f"{speeds.median_basis} runs on any type, each counted at {reference.name}'s speed; the runtime "
            f"above pools every type). Speed known for {known} of the {others} other "
            f"type{'s' if others != 1 else ''}."
        )
    return SpeedGuide(
        reference.name, reference_limit, speeds.reference_median_s, speeds.median_basis, rows, text
    )
