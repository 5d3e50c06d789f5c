"""Celery tasks: thin doors to market services; they take ids, never model instances."""

from __future__ import annotations

from celery import shared_task

from market.models import DONE_STATES, CanaryState, PolicyCanary
from market.services import rounds


@shared_task(name="market.round_tick")
def round_tick() -> int | None:
    """Beat's entry: expire leases, finish unfinished rounds, run this period's round if it is due."""
    rnd = rounds.round_tick()
    return rnd.pk if rnd is not None else None


@shared_task(name="market.round_advance")
def round_advance(round_id: int) -> str:
    """Take one round through its remaining steps (safe to repeat and to run twice at once). A finished round
    has the canary's guardrails judged at once, not at the next beat (docs/policy.md §Canary)."""
    state = rounds.round_advance(round_id=round_id).state
    if state in DONE_STATES and PolicyCanary.objects.filter(state=CanaryState.RUNNING).exists():
        from market.services.canary import canary_check as check

        check()
    return str(state)


@shared_task(name="market.retention_prune")
def retention_prune() -> dict[str, int]:
    """Beat's daily-ish entry: prune round books, bid outcomes and old commands (market.services.retention)."""
    from market.services.retention import retention_prune as prune

    stats = prune()
    return {
        "books": stats.books,
        "outcomes": stats.outcomes,
        "commands": stats.commands,
        "usage_reports": stats.usage_reports,
    }


@shared_task(name="market.allowance_tick")
def allowance_tick() -> int:
    """Beat's entry for recurring allowances: credit each tenant whose period has begun (once per period)."""
    from market.services.allowance import allowances_apply

    return len(allowances_apply())


@shared_task(name="market.canary_check")
def canary_check() -> int | None:
    """Beat's entry (and each finished round's): judge the running canary's guardrails and expiry
    (market.services.canary); the id of the canary it ended, if any."""
    from market.services.canary import canary_check as check

    ended = check()
    return ended.pk if ended is not None else None
