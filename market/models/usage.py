"""Measured usage: what the node agents report, the ledger's input for metered billing (docs/agent.md §Billing
from measurement, §Usage storage). Settlement charges from LeaseUsage, jobs show it and the samples, and the
usage storage upkeep downsamples and drops them, so it is the market's; nodeagent's ingestion
(nodeagent.services.usage) writes it. The older tables keep the names the agent server's app gave them (issue
26): data stays put."""

from __future__ import annotations

from django.db import models


class UsageColumns(models.Model):
    """A node's GPUs in the column order its reports use (their UUIDs, comma-separated): stored once per node
    and order, so a sample row names its columns by this row's id instead of repeating the UUIDs (8 UUIDs
    are 320 bytes, more than the samples themselves). Never changed once written."""

    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="+")
    uuids = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "uuids"], name="usage_columns_node_uuids")]


class UsageSample(models.Model):
    """One report's GPU samples at the agent's sampling interval (10 s by default), packed (market.models.
    usage_blob: ticks x GPUs planes, deflated): one row per report, not per GPU or tick. On PostgreSQL the
    table is partitioned by day on `at` (its first tick), so a day is dropped whole once downsampled
    (market.services.usage_storage); SQLite (`make run`) keeps one plain table. (node, boot_epoch, seq) is
    stored once: the key adds `at` because a partitioned table's key must hold the partition key, and the
    ingest's NOT EXISTS covers a seq sent again with other ticks. A report without samples keeps a row with
    no ticks (`ticks` 0), its (node, boot_epoch, seq) all the same."""

    pk = models.CompositePrimaryKey("node_id", "boot_epoch", "seq", "at")
    # No index or constraint of their own: the key serves the reads, and every byte per row counts.
    node = models.ForeignKey(
        "inventory.Node", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    boot_epoch = models.IntegerField()
    seq = models.BigIntegerField()
    at = models.DateTimeField()
    ticks = models.SmallIntegerField()
    columns = models.ForeignKey(
        UsageColumns,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        null=True,
    )
    data = models.BinaryField()

    class Meta:
        db_table = "market_usagesample"


class UsageMinute(models.Model):
    """A node's 1-minute aggregates for one hour and one column order (market.models.usage_blob.Minutes:
    mean and highest utilisation and memory, energy used, per GPU and minute), written by the downsampling
    from UsageSample days before they are dropped. Partitioned by day on `at` (the hour) on PostgreSQL,
    kept MarketPolicy.retention_days."""

    pk = models.CompositePrimaryKey("node_id", "at", "columns_id")
    # No index or constraint of their own: the key serves the reads, and every byte per row counts.
    node = models.ForeignKey(
        "inventory.Node", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    at = models.DateTimeField()
    columns = models.ForeignKey(
        UsageColumns, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    data = models.BinaryField()

    class Meta:
        db_table = "market_usageminute"


class UsageReport(models.Model):
    """Protocol 1's stored reports, one JSON list of GPU samples per report: no longer written (reports go to
    UsageSample since issue 36), read beside the new rows for one release and pruned by retention as before.
    (node, boot_epoch, seq) is unique."""

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


# Days of 10-s samples kept past the day they were taken: day D's partition takes samples until the end of
# D + RAW_KEEP_DAYS, then is downsampled to 1-minute rows and dropped (market.services.usage_storage).
RAW_KEEP_DAYS = 1
# Partitions made ahead of the day they hold (at migration, then by the hourly storage task).
DAYS_AHEAD = 7
