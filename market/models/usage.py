"""Measured usage: what the node agents report, the ledger's input for metered billing (docs/agent.md §Billing
from measurement). Settlement charges from LeaseUsage, jobs show it, retention prunes old UsageReport rows and
what-if replays it, so it is the market's; nodeagent's ingestion (nodeagent.services.usage) writes it. The
tables keep the names the agent server's app gave them (issue 26): data stays put."""

from __future__ import annotations

from django.db import models


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
        db_table = "nodeagent_usagereport"
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
    # Why the agent says the job ended, beyond its code: "out of memory" (its cgroup's OOM kill). "" otherwise.
    exit_reason = models.CharField(max_length=40, blank=True, default="", db_default="")
    exited_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "nodeagent_leaseusage"
        constraints = [models.UniqueConstraint(fields=["lease", "node"], name="lease_usage_lease_node")]
