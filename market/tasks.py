"""Celery tasks: thin doors to market services; they take ids, never model instances."""

from __future__ import annotations

from celery import shared_task

from market.services import rounds


@shared_task(name="market.round_tick")
def round_tick() -> int | None:
    """Beat's entry: expire leases, finish unfinished rounds, run this period's round if it is due."""
    rnd = rounds.round_tick()
    return rnd.pk if rnd is not None else None


@shared_task(name="market.round_advance")
def round_advance(round_id: int) -> str:
    """Take one round through its remaining steps (safe to repeat and to run twice at once)."""
    return str(rounds.round_advance(round_id=round_id).state)


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
