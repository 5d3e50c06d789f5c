"""How long a winning bid's hold pays for (docs/predictions.md §Holds sized by prediction).

By default a hold covers the job's max hours. A tenant that opted in (HoldPolicy.sized_by_prediction) holds
for the predicted 90th-percentile of its remaining runtime instead, never more than max hours and never less
than MIN_HOLD_SECONDS; a job without a prediction (cold start) holds for max hours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from accounts.models import Tenant
from market.models import LIVE_LEASE_STATES, HoldPolicy, Job, JobState, Lease, OnHoldEnd
from market.selectors.predictions import done_seconds, history_for, query_for

# A hold shorter than this would run out before the job is well started (and a round or two of ticks).
MIN_HOLD_SECONDS = 600

# How long before a sized hold's stop time its owner is warned (and an extension first tried): the rule
# market.services.holds enforces at each round tick.
WARN_BEFORE = timedelta(minutes=15)
# A stop is asked this long plus the grace period before the hold runs out. Round ticks come every few
# seconds; a minute covers a late tick and the agent's reaction time.
STOP_MARGIN = timedelta(seconds=60)


def stop_time(lease: Lease) -> datetime:
    """When the job must be asked to stop for its hold to cover it to the end."""
    assert lease.hold_seconds is not None
    return (
        lease.started_at
        + timedelta(seconds=lease.hold_seconds)
        - timedelta(seconds=lease.grace_seconds)
        - STOP_MARGIN
    )


def hold_ends_at(lease: Lease) -> datetime | None:
    if lease.hold_seconds is None or lease.hold_seconds >= lease.max_seconds:
        return None
    return lease.started_at + timedelta(seconds=lease.hold_seconds)


def hold_policy(*, tenant: Tenant) -> HoldPolicy:
    """The tenant's setting; an unsaved default (off, extend) when it never chose."""
    found = HoldPolicy.objects.filter(tenant=tenant).first()
    return found or HoldPolicy(tenant=tenant)


def sized_hold_seconds(*, job_ids: Iterable[int]) -> dict[int, int]:
    """For the pending jobs among `job_ids` whose tenant sizes holds by prediction: seconds to hold for.
    Jobs of other tenants are left out (they hold for max hours). Two queries, plus two per opted-in tenant
    whose finished-job sample is not cached."""
    tenants = set(HoldPolicy.objects.filter(sized_by_prediction=True).values_list("tenant_id", flat=True))
    if not tenants:
        return {}
    wanted = set(job_ids)
    pending = Job.objects.filter(state=JobState.PENDING, tenant_id__in=tenants).select_related("tenant")
    jobs = [j for j in pending if j.pk in wanted]
    done = done_seconds(job_ids=[j.pk for j in jobs])
    histories = {t.pk: history_for(tenant=t) for t in {j.tenant for j in jobs}}
    out = {}
    for job in jobs:
        q = query_for(tenant=job.tenant, name=job.name, command=job.command, gpus=job.gpus)
        got = histories[job.tenant_id].predict(q, done.get(job.pk, 0.0))
        if got is None:
            out[job.pk] = job.max_seconds
        else:
            want = max(math.ceil(got.remaining_p90_s), MIN_HOLD_SECONDS)
            out[job.pk] = min(want, job.max_seconds)
    return out


def hold_notice(leases: list[Lease]) -> str:
    """For the job page: what a live lease's sized hold pays for, and the warning once it will be stopped."""
    for lease in leases:
        ends = hold_ends_at(lease)
        if lease.state not in LIVE_LEASE_STATES or ends is None:
            continue
        when = ends.strftime("%Y-%m-%d %H:%M UTC")
        if lease.hold_warned_at is not None:
            stop = stop_time(lease).strftime("%Y-%m-%d %H:%M UTC")
            why = (
                "your team chose to stop jobs that outlive their hold"
                if hold_policy(tenant=lease.tenant).on_hold_end == OnHoldEnd.STOP
                else "your team's available balance is too low to extend its hold"
            )
            return f"Warning: this job will be stopped at {stop}, before its hold runs out at {when}: {why}."
        extended = f", extended {lease.hold_extensions} time(s)" if lease.hold_extensions else ""
        return f"Its hold is sized by prediction{extended} and pays for its runtime until {when}."
    return ""
