"""Spend-alert notification (docs/alerts.md): the mail to a team's owners and the signed webhook, each safe to
repeat; and the sweep that finds firings whose notification a stopped worker never queued."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Membership, Role, Tenant
from config.money import format_credits
from market.models import AlertAction, SpendAlertFiring, WebhookDelivery
from market.selectors.spend_alerts import describe, describe_value
from market.services import webhooks

WEBHOOK_ATTEMPTS = 5

SWEEP_AFTER = timedelta(minutes=2)
SWEEP_WITHIN = timedelta(days=1)


def firings_unnotified(*, now: datetime | None = None) -> list[int]:
    """Firings of the last day, older than two minutes, whose mail or first webhook attempt never happened:
    the worker that fired them stopped before it queued their notification (the firing commits first). The
    tick queues them again; both notifications are safe to repeat."""
    now = now or timezone.now()
    recent = SpendAlertFiring.objects.filter(
        fired_at__gte=now - SWEEP_WITHIN, fired_at__lt=now - SWEEP_AFTER, rule__active=True
    )
    no_mail = Q(rule__email=True, emailed_at__isnull=True)
    no_webhook = Q(delivered_at__isnull=True, deliveries__isnull=True) & ~Q(rule__webhook_url="")
    return list(recent.filter(no_mail | no_webhook).order_by("pk").values_list("pk", flat=True).distinct())


def _firing(firing_id: int) -> SpendAlertFiring | None:
    """None when the rule was deleted since (its firings go with it): nothing is left to notify."""
    return SpendAlertFiring.objects.select_related("rule", "rule__tenant").filter(pk=firing_id).first()


def firing_text(firing: SpendAlertFiring) -> str:
    rule = firing.rule
    done = {
        AlertAction.NOTIFY: "Nothing was paused; this is a notice.",
        AlertAction.PAUSE: "New bids of the team are paused until a manager lifts the pause on the Alerts page "
        "(or through the API). Running jobs continue.",
        AlertAction.CAP: f"New bids are capped: one that could take this period's spend, holds and pending bids past "
        f"{format_credits(rule.cap or 0)} credits is refused until a manager lifts the cap. Running jobs "
        "continue.",
    }[AlertAction(firing.action)]
    return (
        f"Spend alert {rule.pk} of team {rule.tenant.name} ({rule.tenant.slug}) crossed at "
        f"{firing.fired_at:%Y-%m-%d %H:%M} UTC.\n\n"
        f"Rule: {describe(rule)}.\nNow: {describe_value(rule, firing.value)}.\n\n{done}\n"
    )


def manager_emails(tenant: Tenant) -> list[str]:
    return sorted(
        set(
            Membership.objects.filter(tenant=tenant, role=Role.MANAGER, user__is_active=True)
            .exclude(user__email="")
            .values_list("user__email", flat=True)
        )
    )


def firing_email(*, firing_id: int) -> bool:
    """Mail the tenant's managers about a firing, once: `emailed_at` is claimed in the transaction that
    sends, so a failed send rolls the claim back (the task retries) and a repeated task finds it taken. A
    firing with nobody to mail is marked done too, so the sweep does not come back for it."""
    firing = _firing(firing_id)
    if firing is None or not firing.rule.email:
        return False
    recipients = manager_emails(firing.rule.tenant)
    with transaction.atomic():
        claimed = SpendAlertFiring.objects.filter(pk=firing.pk, emailed_at__isnull=True).update(
            emailed_at=timezone.now()
        )
        if not claimed or not recipients:
            return False
        send_mail(
            subject=f"[gpumarket] {firing.rule.tenant.name}: {describe(firing.rule)}",
            message=firing_text(firing),
            from_email=None,
            recipient_list=recipients,
        )
    return True


def webhook_body(firing: SpendAlertFiring) -> bytes:
    rule = firing.rule
    return json.dumps(
        {
            "alert": firing.pk,
            "tenant": rule.tenant.slug,
            "rule": {
                "id": rule.pk,
                "kind": rule.kind,
                "threshold": rule.threshold,
                "action": firing.action,
                "cap": rule.cap,
            },
            "period": firing.period,
            "value": firing.value,
            "fired_at": firing.fired_at.isoformat(),
            "text": firing_text(firing),
        },
        sort_keys=True,
    ).encode()


@dataclass(frozen=True)
class Delivery:
    attempt: int  # this attempt's number (0: none made)
    retry: bool  # the task should try again later


def webhook_deliver(*, firing_id: int) -> Delivery:
    """One attempt to POST the firing to its rule's webhook, logged as a WebhookDelivery row. Nothing to do
    (no webhook, already delivered, out of attempts) is attempt 0. The POST is made outside any transaction,
    so a slow receiver holds no lock. At least once: a receiver dedupes on the X-Gpumarket-Alert header."""
    firing = _firing(firing_id)
    if firing is None:
        return Delivery(0, False)
    rule = firing.rule
    if not rule.webhook_url or firing.delivered_at is not None:
        return Delivery(0, False)
    attempt = firing.deliveries.count() + 1
    if attempt > WEBHOOK_ATTEMPTS:
        return Delivery(0, False)
    result = webhooks.post(
        url=rule.webhook_url,
        secret=rule.webhook_secret,
        body=webhook_body(firing),
        alert_id=str(firing.pk),
        timeout_s=settings.SPEND_ALERT_WEBHOOK_TIMEOUT_S,
        allow_private=settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE,
    )
    try:
        with transaction.atomic():
            WebhookDelivery.objects.create(
                firing=firing,
                attempt=attempt,
                url=rule.webhook_url,
                status_code=result.status_code,
                ok=result.ok,
                error=result.error,
                duration_ms=result.duration_ms,
            )
            if result.ok:
                SpendAlertFiring.objects.filter(pk=firing.pk).update(delivered_at=timezone.now())
    except IntegrityError:  # a concurrent attempt logged this number: it decides what comes next
        return Delivery(attempt, False)
    return Delivery(attempt, not result.ok and not result.permanent and attempt < WEBHOOK_ATTEMPTS)


def webhook_backoff(attempt: int) -> int:
    """Seconds before attempt n+1: 30 s, 2 min, 8 min, 32 min."""
    return int(30 * 4 ** (attempt - 1))
