"""A tenant's recurring allowance: credits added every day, week or month, up to a cap (docs/ledger.md)."""

from __future__ import annotations

from django.db import models


class AllowancePeriod(models.TextChoices):
    DAY = "day", "Every day"
    WEEK = "week", "Every week"
    MONTH = "month", "Every month"


class Allowance(models.Model):
    """At the start of each period the tenant's available balance gets `amount`, but never past `cap`.

    `last_period` is the start of the last period applied; the periodic task claims a period by moving it
    forward with a conditional UPDATE in the same transaction as the ledger entry (whose key also names the
    tenant and period), so a period is applied once however many ticks, workers or retries see it.
    """

    tenant = models.OneToOneField("accounts.Tenant", on_delete=models.CASCADE, related_name="allowance")
    amount = models.BigIntegerField(help_text="Micro-credits added each period.")
    period = models.CharField(max_length=8, choices=AllowancePeriod.choices)
    cap = models.BigIntegerField(
        help_text="The allowance never lifts available money above this (micro-credits)."
    )
    active = models.BooleanField(default=True)
    last_period = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="allowance_amount_positive"),
            models.CheckConstraint(condition=models.Q(cap__gte=0), name="allowance_cap_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"allowance of {self.tenant_id} ({self.period})"
