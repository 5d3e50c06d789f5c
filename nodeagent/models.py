"""The agents' credentials and the usage they report (docs/agent.md); the nodes and GPUs themselves are
inventory's (inventory.models)."""

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


class UsageReport(models.Model):
    """One usage report as received, its GPU samples kept as one JSON list (compact: one row per report,
    not per GPU). (node, boot_epoch, seq) is unique, so a repeated report is stored once."""

    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="+")
    boot_epoch = models.PositiveIntegerField()
    seq = models.PositiveBigIntegerField()
    sent_at = models.DateTimeField()
    received_at = models.DateTimeField()
    samples = models.JSONField(
        help_text="[{uuid, at, healthy, util_pct, mem_used_mb, power_w, energy_j, processes}]"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "boot_epoch", "seq"], name="usage_report_node_epoch_seq")
        ]


class LeaseUsage(models.Model):
    """What one node measured for one lease, cumulative from the job's start; every counter keeps the
    largest value reported, so duplicated or late reports change nothing. A gang on several nodes has one
    row per node; settlement sums them."""

    lease = models.ForeignKey("market.Lease", on_delete=models.CASCADE, related_name="usage")
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="+")
    gpu_seconds = models.FloatField(default=0)
    energy_j = models.FloatField(default=0)
    util_avg = models.FloatField(default=0)
    util_max = models.FloatField(default=0)
    mem_avg_mb = models.FloatField(default=0)
    mem_max_mb = models.FloatField(default=0)
    samples = models.PositiveBigIntegerField(default=0)
    log_tail = models.TextField(blank=True)
    # Since when the lease's GPUs have stayed under the idle threshold (the idle policy); None when busy.
    idle_since = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    exited_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lease", "node"], name="lease_usage_lease_node")]
