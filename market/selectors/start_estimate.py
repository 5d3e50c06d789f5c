"""When a bid is likely to start, per GPU type (docs/predictions.md §Estimated start).

The estimate walks forward in time: GPUs free now, then the GPUs each running lease of the type gives back at
its predicted end (its job's predicted remaining runtime, or its max hours when it has no prediction), until
enough are free for the bids ahead of this one in the market order (price per GPU-hour, then submit time) and
for this one. A team with enough unused guarantee starts at the next round whatever the queue. The prices of
recent rounds are shown beside it: a limit below the posted price wins only GPUs left after the guaranteed and
borrowed tiers, so it may start later than the queue alone says. It is an estimate, not a promise: the round
decides, and new higher bids can overtake.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone

from accounts.models import Tenant
from allocator.predict import Query, RuntimeHistory, command_family, name_family
from config.money import format_fixed
from inventory.models import GpuType
from market.models import Lease, LeaseState
from market.selectors.capacity import gpu_capacity
from market.selectors.explain import queue_ahead
from market.selectors.guidance import RECENT_ROUNDS, recent_spot
from market.selectors.policy import market_policy, tenant_policy
from market.selectors.predictions import finished_sample, hours

ENDS_CACHE_SECONDS = 30
_ENDS_KEY = "predict:ends:v1:{}"


@dataclass(frozen=True)
class LeaseEnd:
    at: float  # epoch seconds
    gpus: int
    predicted: bool  # False: no prediction, counted at its max hours


def running_ends(*, gpu_type: GpuType, now: datetime) -> list[LeaseEnd]:
    """When each live lease of the type is expected to give its GPUs back, soonest first (cached briefly)."""
    key = _ENDS_KEY.format(gpu_type.pk)
    found = cache.get(key)
    if found is not None:
        return list(found)
    history = RuntimeHistory()
    for job in finished_sample(None):
        history.add(job)
    rows = Lease.objects.filter(
        gpu_type=gpu_type, state__in=(LeaseState.ALLOCATED, LeaseState.RUNNING, LeaseState.STOPPING)
    ).values_list(
        "gpus", "started_at", "running_at", "max_seconds", "grace_seconds", "state",
        "tenant__slug", "job__name", "job__command", "job__gpus",
    )  # fmt: skip
    t = now.timestamp()
    out = []
    for gpus, started, running, max_s, grace, state, slug, name, command, job_gpus in rows:
        hard_end = started.timestamp() + max_s
        if state == LeaseState.STOPPING:  # asked to stop: gone within its grace period
            out.append(LeaseEnd(t + grace, gpus, True))
            continue
        done = max(t - (running or started).timestamp(), 0.0)
        got = history.predict(Query(slug, name_family(name), command_family(command), job_gpus), done)
        if got is None:
            out.append(LeaseEnd(max(hard_end, t), gpus, False))
        else:
            out.append(LeaseEnd(min(t + got.remaining_median_s, max(hard_end, t)), gpus, True))
    out.sort(key=lambda e: e.at)
    cache.set(key, out, ENDS_CACHE_SECONDS)
    return out


@dataclass(frozen=True)
class StartEstimate:
    gpu_type: str
    limit: int
    at: datetime | None  # None: no estimate (cannot win, or not within the running jobs' ends)
    text: str


def _next_round(now: datetime, period: int) -> datetime:
    t = int(now.timestamp())
    return datetime.fromtimestamp(-(-t // period) * period, tz=now.tzinfo)


def start_estimate(
    *,
    tenant: Tenant,
    gpu_type: GpuType,
    limit: int,
    gpus: int,
    submitted_at: datetime | None = None,
    job_id: int = 0,
    now: datetime | None = None,
) -> StartEstimate:
    """One GPU type's estimate for a bid of `gpus` at `limit`; a submitted job passes its own time and id."""
    now = now or timezone.now()
    period = market_policy().round_seconds
    next_round = _next_round(now, period)
    r, p = gpu_type.reserve_price, gpu_type.current_posted
    spot = recent_spot(gpu_type)
    prices = (
        f"Posted price {format_fixed(p)}, recent spot prices "
        f"{', '.join(format_fixed(s) for s in spot) or 'none yet'} (last {RECENT_ROUNDS} rounds)."
    )
    if limit < r:
        return StartEstimate(
            gpu_type.name, limit, None, f"Never at this limit: below the reserve {format_fixed(r)}."
        )
    policy = tenant_policy(tenant=tenant)
    held = sum(n for (name, _tier), n in policy.held.items() if name == gpu_type.name)
    if policy.guarantees.get(gpu_type.name, 0) - held >= gpus:
        return StartEstimate(
            gpu_type.name, limit, next_round, "Next round: your team's unused guarantee covers it (tier G)."
        )
    free = next((c.free for c in gpu_capacity() if c.gpu_type == gpu_type.name), 0)
    ahead, gpus_ahead = queue_ahead(
        gpu_type=gpu_type.name, limit=limit, submitted_at=submitted_at or now, job_id=job_id
    )
    need = gpus_ahead + gpus
    queue = (
        f"{ahead} bid{'s' if ahead != 1 else ''} ({gpus_ahead} GPUs) ahead of yours at your price or above"
    )
    below = (
        f" Your limit is below the posted price {format_fixed(p)}, so it may start later."
        if limit < p
        else ""
    )
    if free >= need:
        return StartEstimate(
            gpu_type.name, limit, next_round, f"Next round: {free} GPUs free, {queue}. {prices}{below}"
        )
    supply, counted, unpredicted = free, 0, 0
    for end in running_ends(gpu_type=gpu_type, now=now):
        supply, counted = supply + end.gpus, counted + 1
        unpredicted += not end.predicted
        if supply >= need:
            at = max(_next_round(datetime.fromtimestamp(end.at, tz=now.tzinfo), period), next_round)
            basis = (
                f"{free} GPUs free now, {queue}; "
                + (
                    "the first running lease to end frees"
                    if counted == 1
                    else f"the first {counted} running leases to end free"
                )
                + " the rest by their predicted ends"
                + (f" ({unpredicted} without a prediction counted at their max hours)" if unpredicted else "")
            )
            wait = hours(max((at - now).total_seconds(), 0))
            return StartEstimate(gpu_type.name, limit, at, f"In about {wait}: {basis}. {prices}{below}")
    return StartEstimate(
        gpu_type.name,
        limit,
        None,
        f"No estimate: {free} GPUs free and the running leases' ends do not cover the {need} GPUs needed "
        f"({queue}). {prices}",
    )


def start_estimates(
    *, tenant: Tenant, limits: list[tuple[GpuType, int]], gpus: int, submitted_at: datetime | None = None,
    job_id: int = 0, now: datetime | None = None,
) -> list[StartEstimate]:  # fmt: skip
    now = now or timezone.now()
    return [
        start_estimate(
            tenant=tenant, gpu_type=t, limit=lim, gpus=gpus, submitted_at=submitted_at, job_id=job_id, now=now
        )
        for t, lim in limits
    ]
