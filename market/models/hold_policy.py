"""A tenant's choice of how large its jobs' holds are (docs/predictions.md §Holds sized by prediction)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OnHoldEnd(models.TextChoices):
    EXTEND = "extend", "Extend it from the available balance"
    STOP = "stop", "Stop the job at its hold"


class HoldPolicy(models.Model):
    """Off (no row, or `sized_by_prediction` false): a winning bid holds gpus x max hours x price. On: it holds
    the predicted 90th-percentile runtime instead (capped by max hours; max hours when there is no
    prediction), and a job still running when its hold runs out is extended from the available balance or
    stopped, as `on_hold_end` says, with a warning first. Nothing is ever charged beyond the hold."""

    tenant = models.OneToOneField("accounts.Tenant", on_delete=models.CASCADE, related_name="hold_policy")
    sized_by_prediction = models.BooleanField(default=False)
    on_hold_end = models.CharField(max_length=8, choices=OnHoldEnd.choices, default=OnHoldEnd.EXTEND)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"hold policy of {self.tenant_id}"
