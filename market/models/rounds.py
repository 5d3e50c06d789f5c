"""Auction rounds, their prices and every bid's outcome (ARCHITECTURE.md §Rounds and workers)."""

from __future__ import annotations

from django.db import models


class RoundState(models.TextChoices):
    OPEN = "open", "Open"
    FROZEN = "frozen", "Frozen"
    CLEARED = "cleared", "Cleared"
    COMMITTED = "committed", "Committed"
    DISPATCHED = "dispatched", "Dispatched"
    FAILED = "failed", "Failed"


DONE_STATES = (RoundState.DISPATCHED, RoundState.FAILED)


class Round(models.Model):
    """One auction. `slot` (the period's start) is unique, so a second beat or a retried task for the same
    period finds this row instead of starting another round. `book` is the frozen snapshot (zlib-compressed
    allocator JSON), kept so that a round resumed by another worker clears exactly the same input."""

    slot = models.DateTimeField(unique=True)
    period_s = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=RoundState.choices, default=RoundState.OPEN)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    book = models.BinaryField(null=True, blank=True, editable=False)
    digest = models.CharField(max_length=64, blank=True)
    bids = models.PositiveIntegerField(default=0)
    winners = models.PositiveIntegerField(default=0)
    losers = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="Winners dropped at commit (job changed).")
    gpus_free = models.PositiveIntegerField(default=0)
    gpus_allocated = models.PositiveIntegerField(default=0)
    counters = models.JSONField(default=dict)
    freeze_ms = models.PositiveIntegerField(null=True, blank=True)
    clear_ms = models.PositiveIntegerField(null=True, blank=True)
    commit_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    frozen_at = models.DateTimeField(null=True, blank=True)
    cleared_at = models.DateTimeField(null=True, blank=True)
    committed_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-slot"]
        indexes = [models.Index(fields=["state"], name="round_state")]

    def __str__(self) -> str:
        return f"round {self.pk} ({self.state})"


# Why a bid the allocator chose did not become a lease (BidOutcome.reason, beside the allocator's own reasons):
# the round commit sets them, the explanations (market.selectors.explain) read them, so they live here.
SKIP_CHANGED = "job_changed_during_round"
SKIP_GPUS_TAKEN = "gpus_taken_during_round"
SKIP_BUDGET = "over_budget_at_commit"
SKIP_HOLD_CONFLICT = "hold_key_conflict"
SKIP_UNAVAILABLE = "gpus_unavailable_during_round"
SKIP_UNCONFINED = "node_without_sandbox"  # issue 35: an untrusted tenant's job on a node that cannot sandbox
# The allocator's reason for a bid that found no GPU left for spot (allocator.result.BUSY) and the evidence the
# commit keeps for it in Round.counters, per GPU type where some bid lost so: the type's GPUs after the round held
# by guaranteed ("G"), borrowed ("B") and spot ("S") leases, and those left free ("free"). The job page's
# sentence (market.selectors.explain) names them.
BUSY = "busy"
USE_PARTS = ("G", "B", "S", "free")


def use_key(part: str, gpu_type: str) -> str:
    """The Round.counters key of one part of a type's use after the round (USE_PARTS)."""
    return f"use_{part}:{gpu_type}"


class RoundPrice(models.Model):
    """Prices of one GPU type in one round, micro-credits per GPU-hour. `spot` is null with no spot winner;
    `next_posted` is what the round published for the next one."""

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="prices")
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.PROTECT, related_name="round_prices")
    reserve = models.BigIntegerField()
    posted = models.BigIntegerField()
    spot = models.BigIntegerField(null=True, blank=True)
    next_posted = models.BigIntegerField()
    # Fragmentation at commit: GPUs of the type left free by count after the round's placements, and how many
    # nodes of the type are wholly free (every GPU). Null on rounds from before they were recorded.
    free_gpus = models.PositiveIntegerField(null=True, blank=True)
    free_nodes = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-round_id", "gpu_type__name"]
        constraints = [models.UniqueConstraint(fields=["round", "gpu_type"], name="round_price_unique")]


class Reservation(models.Model):
    """A node one round held for a blocked gang (Result.reserved_node/_job/_start, step 5): nothing but backfill
    predicted to end before `expected_start` may start on it. One row per node and round, written by the commit;
    the newest committed round's rows are the reservations now (docs/rounds.md §Reservations and backfill)."""

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="reservations")
    # Real constraints: a round writes a few of these, not thousands (the bulk-written tables skip them).
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    job = models.ForeignKey("market.Job", on_delete=models.CASCADE, related_name="reservations")
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.PROTECT, related_name="+")
    expected_start = models.DateTimeField(null=True, blank=True)  # null: unknown (a drain time not predicted)

    class Meta:
        ordering = ["-round_id", "node_id"]
        constraints = [models.UniqueConstraint(fields=["round", "node"], name="reservation_round_node")]

    def __str__(self) -> str:
        return f"round {self.round_id}: node {self.node_id} for job {self.job_id}"


class BidOutcome(models.Model):
    """What one round decided for one bid: won (tier, type, price) or lost (reason and its figure). A loss is
    written only when it differs from the job's newest row (docs/rounds.md §At fleet scale, writing less): a
    loss row stands for the rounds after it until the job's next row (market.selectors.explain)."""

    # A first round writes one row per bid (20,000 at a time), so these references are kept by the code, not by
    # the database: the round commit writes them for the round it holds locked and the jobs it just read, in
    # one transaction, and nothing else writes outcomes. A foreign key constraint would add three checks per
    # row at COMMIT (most of the commit's own time at 20,000 bids: docs/rounds.md §Measured); Django still
    # cascades deletes. No index that no query needs either: the unique (job, round) index below serves
    # lookups by job, and nothing looks outcomes up by GPU type.
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="outcomes", db_constraint=False)
    job = models.ForeignKey(
        "market.Job", on_delete=models.CASCADE, related_name="outcomes", db_index=False, db_constraint=False
    )
    bid_version = models.PositiveIntegerField()
    won = models.BooleanField()
    tier = models.CharField(max_length=1, blank=True)
    gpu_type = models.ForeignKey(
        "inventory.GpuType",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    price = models.BigIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=40, blank=True)
    figure = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-round_id"]
        constraints = [models.UniqueConstraint(fields=["job", "round"], name="outcome_job_round")]


class RoundLoss(models.Model):
    """How many of one tenant's bids lost in one round, and why (BidOutcome.reason): the per-round aggregate
    the fair-share diagnosis counts (market.selectors.fair_share), since a bid that lost as before writes no
    outcome row (docs/rounds.md §At fleet scale, writing less). A few rows per losing tenant and round."""

    # Bulk-written by the round commit for the round it holds and the tenants it just read, as outcomes are:
    # the references are kept by the code (no check at COMMIT); Django still cascades deletes.
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="losses", db_constraint=False)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    reason = models.CharField(max_length=40)
    bids = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["round", "tenant", "reason"], name="round_loss_unique")
        ]
