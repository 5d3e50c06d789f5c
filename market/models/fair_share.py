"""The fair-share history and the per-round figures it is judged by (allocator/fairshare.py, docs/rounds.md).

``FairShareUsage`` is the history the clearing keeps between rounds (``Tenants.owed``): one row per tenant and
GPU type, rewritten by each round's commit. ``FairShareRound`` keeps one round's demand and target per tenant
and type, a few numbers, so the console can compute windowed compliance over a day of rounds without
decompressing a day of frozen books (and after retention has dropped them).
"""

from __future__ import annotations

from django.db import models


class FairShareUsage(models.Model):
    """GPU-hours of fair-share target the tenant did not receive in the type (negative: received beyond it),
    decayed with the policy's half-life, as of ``updated_at`` (the book time of the round that wrote it).
    ``round`` is that round: a commit that finds its own round (or a later one) here has already accrued."""

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="fair_share")
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.CASCADE, related_name="+")
    owed_gpu_hours = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()
    # No database constraint: retention may delete old rounds while the history they left stays valid.
    round = models.ForeignKey(
        "market.Round", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "gpu_type"], name="fair_share_usage_unique")]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.gpu_type_id}: {self.owed_gpu_hours:.2f} GPU-h owed"


class FairShareRound(models.Model):
    """One round's fair-share figures for one tenant and type, from its frozen book (allocator.fairshare):
    GPUs held before the round, GPUs waiting (eligible, affordable, best type), the smallest waiting gang
    (null: none waits), the target, and the type's GPUs. Only pairs with something held, waiting or targeted."""

    round = models.ForeignKey("market.Round", on_delete=models.CASCADE, related_name="fair_share")
    slot = models.DateTimeField()  # the round's, copied: the console reads a window of these by time
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+")
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.CASCADE, related_name="+")
    held = models.PositiveIntegerField()
    waiting = models.PositiveIntegerField()
    smallest = models.PositiveIntegerField(null=True, blank=True)
    target = models.FloatField()
    capacity = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["round", "tenant", "gpu_type"], name="fair_share_round_unique")
        ]
        indexes = [models.Index(fields=["slot"], name="fair_share_round_slot")]
