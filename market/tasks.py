"""Celery tasks: thin doors to market services; they take ids, never model instances."""

from __future__ import annotations

from celery import Task, shared_task

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
    """Beat's hourly entry: prune round books, bid outcomes and old commands, and keep the usage samples'
    partitions (made ahead, downsampled, dropped: market.services.retention, market.services.usage_storage)."""
    from market.services.retention import retention_prune as prune

    stats = prune()
    return {
        "books": stats.books,
        "outcomes": stats.outcomes,
        "commands": stats.commands,
        "usage_reports": stats.usage_reports,
        "usage_days_downsampled": stats.usage_days_downsampled,
        "usage_minute_days_dropped": stats.usage_minute_days_dropped,
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


@shared_task(name="market.spend_alerts_tick")
def spend_alerts_tick() -> int:
    """Beat's entry for spend alerts: evaluate every rule, then notify each new firing, and again each one whose
    notification a stopped worker never queued (docs/alerts.md)."""
    from market.services.spend_alert_notify import firings_unnotified
    from market.services.spend_alerts import spend_alerts_evaluate

    fired = spend_alerts_evaluate()
    for firing_id in [*fired, *firings_unnotified()]:
        spend_alert_email.delay(firing_id)
        spend_alert_webhook.delay(firing_id)
    return len(fired)


@shared_task(name="market.spend_alert_email", bind=True, max_retries=5)
def spend_alert_email(self: Task, firing_id: int) -> bool:  # type: ignore[type-arg]  # celery-types' Task is generic
    """Mail a firing to the tenant's managers; a failed send (the SMTP server away) is retried."""
    from market.services.spend_alert_notify import firing_email

    try:
        return firing_email(firing_id=firing_id)
    except OSError as exc:  # smtplib's errors are OSErrors
        raise self.retry(exc=exc, countdown=60 * (self.request.retries + 1)) from exc


@shared_task(name="market.spend_alert_webhook", bind=True, max_retries=None)
def spend_alert_webhook(self: Task, firing_id: int) -> int:  # type: ignore[type-arg]  # celery-types' Task is generic
    """One webhook attempt per run; the service counts attempts in the delivery log (at most 5), so the
    retries stop there however often the task is delivered."""
    from market.services.spend_alert_notify import webhook_backoff, webhook_deliver

    done = webhook_deliver(firing_id=firing_id)
    if done.retry:
        raise self.retry(countdown=webhook_backoff(done.attempt))
    return done.attempt
