"""Guarantees: GPUs of one type a tenant is always entitled to. Market policy; its rule (the sum of a type's
guarantees stays within the cluster's GPUs of it) is market.services.guarantees."""

from __future__ import annotations

from django.db import models


class Guarantee(models.Model):
    """GPUs of one type a tenant is always entitled to (ARCHITECTURE.md §Clearing, tier G)."""

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="guarantees")
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.PROTECT, related_name="guarantees")
    gpus = models.PositiveIntegerField()

    class Meta:
        # The table accounts created before the guarantee moved to the market (issue 26): data stays put.
        db_table = "accounts_guarantee"
        constraints = [models.UniqueConstraint(fields=["tenant", "gpu_type"], name="guarantee_unique")]
