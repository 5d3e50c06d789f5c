"""The agents' credentials and the ingestion's bookkeeping (docs/agent.md). The nodes and GPUs themselves are
inventory's (inventory.models); the usage the agents report (UsageReport, LeaseUsage) is the market's
(market.models.usage), which bills from it. UsageMark stays here: only the ingestion reads it."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class BootstrapToken(models.Model):
    """A one-time secret (gpb_...) an admin hands to a new machine's agent: good for one registration.
    It may fix the node's name, GPU type and topology domain."""

    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=128, blank=True, help_text="The node's name; the agent's when empty.")
    gpu_type = models.ForeignKey("inventory.GpuType", null=True, blank=True, on_delete=models.PROTECT)
    topology_domain = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    node = models.ForeignKey(
        "inventory.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'any name'})"


class UsageMark(models.Model):
    """The highest report sequence number seen from one boot of one node's agent."""

    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="+")
    boot_epoch = models.PositiveIntegerField()
    seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "boot_epoch"], name="usage_mark_node_epoch")]
