"""Shadow rounds (docs/rounds.md §Shadow rounds): which proposed policy versions run in shadow, and what each
live round would have done differently under them."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from market.models.rounds import Round


class ShadowRun(models.Model):
    """A proposed version running in shadow from `started_at` until an admin stops it (`stopped_at`). A version
    has at most one open run; a stopped one stays as the record of when it ran."""

    version = models.ForeignKey("market.PolicyVersion", on_delete=models.CASCADE, related_name="shadow_runs")
    started_at = models.DateTimeField(auto_now_add=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    stopped_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["version"],
                condition=models.Q(stopped_at__isnull=True),
                name="shadow_run_one_open_per_version",
            )
        ]

    def __str__(self) -> str:
        return f"shadow of version {self.version_id} from {self.started_at:%Y-%m-%d %H:%M}"


class ShadowRound(models.Model):
    """One live round cleared again under one version. The summary columns are
    market.selectors.shadow_diff.SUMMARY_KEYS (tests/market/test_shadow_models.py checks they match), so the
    console sums them in the database; `prices` holds each GPU type's next posted and spot price on both sides,
    `tenants` each tenant's figures where something differs (ShadowDiff). Deleted with the round's other detail
    after the policy's retention period (market.services.retention)."""

    version = models.ForeignKey(
        "market.PolicyVersion", on_delete=models.CASCADE, related_name="shadow_rounds"
    )
    # Round rows are never deleted (retention keeps them); no database constraint, like the round's other refs.
    round = models.ForeignKey(Round, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    clear_ms = models.PositiveIntegerField(default=0, help_text="The shadow's own clearing time.")
    bids = models.PositiveIntegerField(default=0)
    winners_live = models.PositiveIntegerField(default=0)
    winners_proposed = models.PositiveIntegerField(default=0)
    gained = models.PositiveIntegerField(default=0, help_text="Bids won under the proposal that lost live.")
    lost = models.PositiveIntegerField(
        default=0, help_text="Bids won live that the proposal would have lost."
    )
    repriced = models.PositiveIntegerField(
        default=0, help_text="Won on both sides, at another price or tier."
    )
    gpus_live = models.PositiveIntegerField(default=0)
    gpus_proposed = models.PositiveIntegerField(default=0)
    gpu_hours_live = models.PositiveBigIntegerField(default=0)
    gpu_hours_proposed = models.PositiveBigIntegerField(default=0)
    preemptions_live = models.PositiveIntegerField(default=0)
    preemptions_proposed = models.PositiveIntegerField(default=0)
    fair_counted_live = models.PositiveIntegerField(default=0)
    fair_counted_proposed = models.PositiveIntegerField(default=0)
    fair_complied_live = models.PositiveIntegerField(default=0)
    fair_complied_proposed = models.PositiveIntegerField(default=0)
    prices_differ = models.PositiveIntegerField(default=0)
    prices = models.JSONField(default=dict)
    tenants = models.JSONField(default=dict)

    class Meta:
        constraints = [
            # One shadow per version and round; also the index of "this version's rounds", newest first.
            models.UniqueConstraint(fields=["version", "round"], name="shadow_round_once")
        ]
        indexes = [models.Index(fields=["round"], name="shadow_round_round")]  # retention deletes by round

    def __str__(self) -> str:
        return f"shadow of round {self.round_id} under version {self.version_id}"
