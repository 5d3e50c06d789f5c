"""Spend alerts (docs/alerts.md): a tenant's rules on its spending, each crossing of one, and the webhook
deliveries of a crossing.

A rule fires at most once per period: its firing row is unique on (rule, period key), inserted in the same
transaction that decides the rule crossed, so retried ticks and two workers never double-send. A rule whose
action pauses or caps bids blocks new bids from its firing until a manager lifts it (`blocked_since`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AlertKind(models.TextChoices):
    SPEND_DAY = "spend_day", "Spend per day above"
    SPEND_WEEK = "spend_week", "Spend per week above"
    RUNWAY = "runway_hours", "Money lasts fewer hours than"


class AlertAction(models.TextChoices):
    NOTIFY = "notify", "Notify only"
    PAUSE = "pause", "Pause new bids"
    CAP = "cap", "Cap new bids"


class SpendAlertRule(models.Model):
    """`threshold`: micro-credits for the spend kinds, whole hours for the runway kind. `cap` (micro-credits,
    the cap action only): once the rule fired, a new bid whose worst-case cost would take the period's spend
    and open holds past it is refused. `webhook_secret` signs the webhook's body; it is shown once, when
    the rule is created (it must stay readable here to sign)."""

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="spend_alert_rules")
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    threshold = models.BigIntegerField()
    action = models.CharField(max_length=8, choices=AlertAction.choices, default=AlertAction.NOTIFY)
    cap = models.BigIntegerField(null=True, blank=True)
    email = models.BooleanField(default=True, help_text="Mail the tenant's managers when it fires.")
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    webhook_secret = models.CharField(max_length=64, blank=True, default="")
    active = models.BooleanField(default=True)
    blocked_since = models.DateTimeField(null=True, blank=True)
    client_key = models.CharField(max_length=200, blank=True, default="")
    request_digest = models.CharField(max_length=64, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(threshold__gt=0), name="spend_alert_threshold_positive"
            ),
            models.UniqueConstraint(
                fields=["tenant", "client_key"],
                condition=~models.Q(client_key=""),
                name="spend_alert_client_key_unique",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant"], condition=models.Q(blocked_since__isnull=False), name="spend_alert_blocked"
            )
        ]

    def __str__(self) -> str:
        return f"spend alert {self.pk} of {self.tenant_id} ({self.kind} {self.threshold}, {self.action})"


class SpendAlertFiring(models.Model):
    """One crossing of a rule in one period (`period` is e.g. "2026-11-23" for the week from that Monday).
    `value` is what was observed (micro-credits, or hours for the runway kind). `emailed_at` is claimed with
    a conditional UPDATE before the mail goes, so a repeated task never mails twice."""

    rule = models.ForeignKey(SpendAlertRule, on_delete=models.CASCADE, related_name="firings")
    period = models.CharField(max_length=32)
    value = models.BigIntegerField()
    threshold = models.BigIntegerField()
    action = models.CharField(max_length=8, choices=AlertAction.choices)
    fired_at = models.DateTimeField()
    emailed_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-fired_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "period"], name="spend_alert_once_per_period"),
        ]

    def __str__(self) -> str:
        return f"firing of rule {self.rule_id} for {self.period}"


class WebhookDelivery(models.Model):
    """One attempt to POST a firing to its rule's webhook: what came back, or why nothing did."""

    firing = models.ForeignKey(SpendAlertFiring, on_delete=models.CASCADE, related_name="deliveries")
    attempt = models.PositiveSmallIntegerField()
    url = models.CharField(max_length=500)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["firing", "attempt"], name="webhook_delivery_attempt_unique"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.attempt} of firing {self.firing_id}"
