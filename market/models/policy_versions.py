"""Policy versions and canaries (docs/policy.md §Versions, §Canary).

A PolicyVersion is one immutable record of the whole policy (a market.selectors.policy_snapshot value) with
who made it, when and why. Every policy write creates one in its own transaction (market.services.
policy_versions.policy_versioned); a proposed version is a draft that was never in force (what a shadow round
or a canary tests). A PolicyCanary applies a proposed version to a few tenants and/or for a bounded time, and
is reverted automatically when one of its guardrails trips.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class VersionKind(models.TextChoices):
    CHANGE = "change", "Change"
    REVERT = "revert", "Revert"
    # A proposed draft applied to everyone (a revert whose target is a draft): not a step back (issue 37 §5).
    APPLY = "apply", "Draft applied"
    CANARY_START = "canary-start", "Canary start"
    CANARY_PROMOTE = "canary-promote", "Canary promoted"
    CANARY_REVERT = "canary-revert", "Canary reverted"
    PROPOSED = "proposed", "Proposed"


class VersionStatus(models.TextChoices):
    # A draft never in force: what shadow rounds and canaries test.
    PROPOSED = "proposed", "Proposed"
    # Was the policy in force from its created_at until the next applied version.
    APPLIED = "applied", "Applied"


class ImmutableVersionError(Exception):
    """A version's content (snapshot, reason, who, when, kind, parent) never changes after it is written."""


# The only column an existing version may still have written: a draft's status (what it recorded never changes).
_MUTABLE = frozenset({"status"})


class PolicyVersion(models.Model):
    number = models.PositiveIntegerField(unique=True, help_text="Monotonic, from 1; proposed drafts too.")
    snapshot = models.JSONField(
        help_text="The whole policy (market.selectors.policy_snapshot.PolicySnapshot)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=VersionKind.choices)
    status = models.CharField(max_length=16, choices=VersionStatus.choices)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The version in force when this one was made (a revert: the version it restored).",
    )
    # What the write could not do or acted for: tenants and GPU types a revert skipped, the canary it belongs to.
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-number"]
        indexes = [models.Index(fields=["status", "-number"], name="policy_version_status")]

    def __str__(self) -> str:
        return f"policy version {self.number} ({self.kind})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = kwargs.get("update_fields")
        if self.pk is not None and not (fields and set(fields) <= _MUTABLE):
            raise ImmutableVersionError(f"policy version {self.number} cannot be changed")
        super().save(*args, **kwargs)


class CanaryState(models.TextChoices):
    RUNNING = "running", "Running"
    PROMOTED = "promoted", "Promoted"
    REVERTED = "reverted", "Reverted"


class OnExpiry(models.TextChoices):
    PROMOTE = "promote", "Promote to everyone"
    REVERT = "revert", "Revert"


class PolicyCanary(models.Model):
    """A proposed version tried on `tenants` (their weight, guardrail, guarantees, allowance) and, with
    `market`, on the market knobs and GPU type prices, until it is promoted, reverted, trips a guardrail or
    reaches `ends_at`. At most one runs at a time (a partial unique constraint)."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="canaries")
    base = models.ForeignKey(
        PolicyVersion, on_delete=models.PROTECT, related_name="+", help_text="The version before the canary."
    )
    started = models.ForeignKey(
        PolicyVersion, on_delete=models.PROTECT, related_name="+", help_text="The canary-start version."
    )
    ended = models.ForeignKey(
        PolicyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    tenants = models.JSONField(default=list, help_text="Slugs of the tenants it applies to.")
    market = models.BooleanField(default=False, help_text="Applies the market knobs and GPU type prices too.")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    on_expiry = models.CharField(max_length=8, choices=OnExpiry.choices, default=OnExpiry.REVERT)
    # Guardrails (null: not checked). Compliance: per cent of the rounds a tenant waited in where it held at
    # least 95% of its fair-share target, over the last `window_s` (market.selectors.fair_share, docs/policy.md).
    min_compliance_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    max_failed_rounds = models.PositiveIntegerField(null=True, blank=True)
    max_preemptions_per_hour = models.PositiveIntegerField(null=True, blank=True)
    window_s = models.PositiveIntegerField(default=3600)
    state = models.CharField(max_length=8, choices=CanaryState.choices, default=CanaryState.RUNNING)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    last_check = models.JSONField(
        default=dict, blank=True, help_text="The guardrails' figures at the last check."
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["state"], condition=models.Q(state="running"), name="policy_canary_one_running"
            )
        ]

    def __str__(self) -> str:
        return f"canary of policy version {self.version.number} ({self.state})"
