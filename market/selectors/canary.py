"""The figures a canary's guardrails are judged on (docs/policy.md §Canary)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from market.models import EndReason, Lease, PolicyCanary, Round, RoundState
from market.selectors.fair_share import round_compliance_by_tenant


@dataclass(frozen=True)
class CanaryFigures:
    since: datetime  # the later of the canary's start and the window's start
    worst_tenant: str | None
    worst_compliance_pct: (
        float | None
    )  # the lowest tenant's fair-share compliance; None: no tenant had demand
    failed_rounds: int
    preemptions: int
    preemptions_per_hour: float  # over the whole window, so a burst in its first minute is not multiplied up

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "since": self.since.isoformat()}


def canary_running() -> PolicyCanary | None:
    return PolicyCanary.objects.select_related("version", "base", "started").filter(state="running").first()


def canary_figures(canary: PolicyCanary, now: datetime) -> CanaryFigures:
    """Over the last `window_s` of the canary's life: every tenant's fair-share round compliance (the
    platform's yardstick, allocator.fairshare, from the rounds' stored FairShareRound rows), rounds that
    failed, and leases preempted."""
    since = max(canary.started_at, now - timedelta(seconds=canary.window_s))
    compliance = round_compliance_by_tenant(since=since, until=now)
    worst = min(compliance, key=lambda slug: (compliance[slug], slug), default=None)
    preempted = Lease.objects.filter(end_reason=EndReason.PREEMPTED, stop_requested_at__gte=since).count()
    return CanaryFigures(
        since=since,
        worst_tenant=worst,
        worst_compliance_pct=round(compliance[worst] * 100, 2) if worst is not None else None,
        failed_rounds=Round.objects.filter(state=RoundState.FAILED, created_at__gte=since).count(),
        preemptions=preempted,
        preemptions_per_hour=preempted * 3600 / canary.window_s,
    )


def tripped(canary: PolicyCanary, figures: CanaryFigures) -> str | None:
    """The first guardrail the figures break, in words for the audit log; None: all hold."""
    low = canary.min_compliance_pct
    if low is not None and figures.worst_compliance_pct is not None and figures.worst_compliance_pct < low:
        return (
            f"fair-share compliance of {figures.worst_tenant} was {figures.worst_compliance_pct:g}%, "
            f"below {low}%"
        )
    if canary.max_failed_rounds is not None and figures.failed_rounds > canary.max_failed_rounds:
        return f"{figures.failed_rounds} rounds failed, more than {canary.max_failed_rounds}"
    rate = canary.max_preemptions_per_hour
    if rate is not None and figures.preemptions_per_hour > rate:
        return f"{figures.preemptions_per_hour:g} preemptions per hour, more than {rate}"
    return None
