"""Leases: a job's claim on GPUs of one node, backed by a budget hold (ARCHITECTURE.md §Money)."""

from __future__ import annotations

from django.db import models


class LeaseState(models.TextChoices):
    ALLOCATED = "allocated", "Allocated"  # committed; the bind command waits in the outbox
    RUNNING = "running", "Running"  # the agent reported the job started
    STOPPING = "stopping", "Stopping"  # a preempt or release command was sent; the GPUs may be reassigned
    ENDED = "ended", "Ended"  # settled


LIVE_LEASE_STATES = (LeaseState.ALLOCATED, LeaseState.RUNNING)


class EndReason(models.TextChoices):
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    PREEMPTED = "preempted", "Preempted"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"
    NODE_LOST = "node_lost", "Node lost"
    IDLE = "idle", "Released idle"  # the idle policy: its GPUs stayed under the threshold too long
    HOLD_SPENT = (
        "hold_spent",
        "Stopped at its hold",
    )  # a hold sized by prediction ran out (docs/predictions.md)


class PreemptReason(models.TextChoices):
    """The allocator rule that preempted a lease (step 6). The values are the allocator's own names
    (allocator.PREEMPT_NAMES, what its JSON result says), so the code is stable across both."""

    RECLAIM_GUARANTEE = "reclaim_guarantee", "Guarantee reclaim"  # restores another tenant's guarantee
    FAIR_SHARE = "fair_share", "Fair-share reclaim"  # brings another tenant up to its entitlement
    # Started by backfill on a node reserved for a gang, it ran past its predicted end and the gang is due.
    BACKFILL_OVERRAN = "backfill_overran", "Backfill overran"
    # Moved to other GPUs to make room for a gang: its job got a new lease in the same round (Result.moves).
    MOVED = "moved", "Moved"


# The round commit writes leases, their GPUs and their commands by the thousand, and a foreign key constraint
# costs one check per reference per row at COMMIT (49,000 at 4,688 winners: over half of the round's COMMIT,
# docs/rounds.md §Measured). So these references are kept by the code, as bid outcomes' are: every writer
# takes them from rows it read (jobs and the round locked) in the same transaction, and nothing deletes a
# job, tenant, round, node, GPU or GPU type (they are retired or deactivated); on_delete still guards a
# delete made through Django (PROTECT refuses it, CASCADE removes the lease's GPU rows), and the indexes stay.
# Hence db_constraint=False below and on Command's references (market.models.outbox).


class Lease(models.Model):
    """GPUs of one node held for one job at one price. `hold_key` names its ledger hold."""

    job = models.ForeignKey(
        "market.Job", on_delete=models.PROTECT, related_name="leases", db_constraint=False
    )
    tenant = models.ForeignKey(
        "accounts.Tenant",
        on_delete=models.PROTECT,
        related_name="leases",
        db_constraint=False,
        db_index=False,  # lease_tenant_state leads with it
    )
    round = models.ForeignKey(
        "market.Round", on_delete=models.PROTECT, related_name="leases", db_constraint=False
    )
    # The node of its first GPU; a gang on whole nodes spans several (see lease_gpus), one command per node.
    # Neither is indexed: no query selects leases by node (they go through lease_gpus) or by type alone, and
    # every index is written for each of the thousands of leases a round places.
    node = models.ForeignKey(
        "inventory.Node",
        on_delete=models.PROTECT,
        related_name="leases",
        db_constraint=False,
        db_index=False,
    )
    gpu_type = models.ForeignKey(
        "inventory.GpuType",
        on_delete=models.PROTECT,
        related_name="leases",
        db_constraint=False,
        db_index=False,
    )
    tier = models.CharField(max_length=1)
    preemptible = models.BooleanField()
    price = models.BigIntegerField(help_text="Micro-credits per GPU-hour.")
    gpus = models.PositiveIntegerField()
    max_seconds = models.PositiveIntegerField()
    # Seconds from started_at its hold pays for: max_seconds, or less when the tenant sizes holds by prediction
    # (then extended or stopped as it runs out: market.services.holds). Null on leases from before.
    hold_seconds = models.PositiveIntegerField(null=True, blank=True)
    hold_extensions = models.PositiveIntegerField(default=0, db_default=0)  # bulk-inserted without it
    hold_warned_at = models.DateTimeField(null=True, blank=True)
    grace_seconds = models.PositiveIntegerField()
    # The ledger hold paying for it: since issue 36 its tenant's hold for the round (round:R:tenant:T), shared
    # with the tenant's other winners of that round, of which `hold_share` is this lease's part (its own
    # extensions included). A null share: the whole hold (leases from before, each with its own hold).
    hold_key = models.CharField(max_length=200)
    hold_share = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=LeaseState.choices, default=LeaseState.ALLOCATED)
    started_at = models.DateTimeField()
    running_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=16, choices=EndReason.choices, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    charged = models.BigIntegerField(null=True, blank=True)
    # Why a round preempted it (set with end_reason "preempted" by the round commit, from the allocator's
    # Result.preemptions): the rule, the round, and the job whose guarantee or entitlement it made room for
    # (docs/rounds.md §Why a lease was preempted). Empty and null on every other lease, and on leases
    # preempted before these were recorded. db_default: the commit inserts leases without these columns.
    # Neither reference has an index (nothing looks leases up by them, and an index on columns null in
    # nearly every row would cost each commit's inserts), so a delete of the job or round does not look for
    # them either (DO_NOTHING): readers take a claimant that is gone as unknown. The partial index below
    # holds only preempted leases, for the metrics' count by reason.
    preempt_reason = models.CharField(
        max_length=24, choices=PreemptReason.choices, blank=True, default="", db_default=""
    )
    preempted_round = models.ForeignKey(
        "market.Round",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="preempted_leases",
        db_constraint=False,
        db_index=False,
    )
    preempted_for = models.ForeignKey(
        "market.Job",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="preempted_leases",
        db_constraint=False,
        db_index=False,
        help_text="The job the preemption made room for (of another tenant: reclaim never takes its own).",
    )

    # When the job last saved its work, as its node's agent reported it (a marker line in its log or a file
    # written in its checkpoint directory: docs/agent.md §Checkpoints). Only ever moves forward and never past
    # the server's clock; null until one is reported, and on leases from before. The clearing reads it: reclaim
    # prefers victims that lose the least work (allocator.book.Leases.checkpoint).
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    # GPU-seconds of work the preemption threw away: gpus x seconds from the later of the job's start and its
    # last checkpoint to the round that preempted it. Set by the round commit with end_reason "preempted";
    # null on every other lease and on leases preempted before it was recorded.
    lost_gpu_s = models.FloatField(null=True, blank=True)
    # Which part of a gang ended it and how, in words ("part 1 on node b exited with code 3", "node b (part 1)
    # down"): set with the end reason by the gang rules (market.services.lease_parts). Empty on a lease that
    # ended as a whole (completed, preempted, cancelled) and on leases from before.
    end_detail = models.CharField(max_length=300, blank=True, default="", db_default="")
    # Started by backfill on a node reserved for a gang (the round's Result.backfill_job), predicted to end
    # before the gang is due: if it runs past that, it is the first lease the gang takes back (frozen into the
    # book as Leases.backfill). db_default: the commit inserts leases without it.
    backfill = models.BooleanField(default=False, db_default=False)
    # The lease of the same job this one replaces when a round moved it (Result.moves): this lease is bound only
    # once that one has released its GPUs (market.services.moves). Null on every other lease.
    moved_from = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["state"], name="lease_state"),
            models.Index(fields=["tenant", "state"], name="lease_tenant_state"),
            models.Index(
                fields=["preempt_reason"], name="lease_preempt_reason", condition=~models.Q(preempt_reason="")
            ),
            # Partial, as preempt_reason's: lease_stopped looks up a moved lease's successor, and the scrape
            # counts moves and backfilled GPU-seconds, reading only the few rows these hold.
            models.Index(
                fields=["moved_from"], name="lease_moved_from", condition=models.Q(moved_from__isnull=False)
            ),
            models.Index(fields=["backfill"], name="lease_backfill", condition=models.Q(backfill=True)),
        ]
        # Not unique (a round's hold is shared by the tenant's winners); no index either: settlement and the
        # job page name the hold from the lease, spend reads by the entry's lease, nothing looks a lease up by it.

    def __str__(self) -> str:
        return f"lease {self.pk} of job {self.job_id} ({self.state})"


class LeaseGpu(models.Model):
    """A GPU bound to a lease. `active` is cleared when the GPU is given to another lease or freed; the
    partial unique index makes "no GPU bound twice" a database rule, not only the allocator's."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="lease_gpus", db_constraint=False)
    gpu = models.ForeignKey(
        "inventory.Gpu", on_delete=models.PROTECT, related_name="lease_gpus", db_constraint=False
    )
    active = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"], condition=models.Q(active=True), name="lease_gpu_bound_once"
            )
        ]


class PartState(models.TextChoices):
    """One node's part of a lease (docs/agent.md §Multi-node gangs). A part without a row is still waiting
    for its agent to start it (its bind is in the outbox)."""

    RUNNING = "running", "Running"  # its agent started it
    EXITED = "exited", "Exited"  # its processes are gone (exit_code / signal say how)
    REFUSED = "refused", "Could not start"  # its agent refused the bind: the gang never ran together
    LOST = "lost", "Node down"  # its node was declared down under it


PART_ENDED = (PartState.EXITED, PartState.REFUSED, PartState.LOST)


class LeasePart(models.Model):
    """What one node of a lease reported: started, exited (with its exit code or signal), refused, lost.

    Written when the first of those happens, not by the round commit (that inserts leases by the thousand,
    and most parts are the only part of their lease). The rank is the node's place in the lease's nodes in
    id order (market.gang.part_ranks), the same the bind gave the part. The lease is settled once every part
    has ended (market.services.lease_parts)."""

    # Real constraints, unlike the round commit's tables: parts are written one report at a time.
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="parts", db_index=False)
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+")
    rank = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=PartState.choices)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["lease", "rank"]
        constraints = [models.UniqueConstraint(fields=["lease", "node"], name="lease_part_lease_node")]

    def __str__(self) -> str:
        return f"part {self.rank} of lease {self.lease_id} ({self.state})"
