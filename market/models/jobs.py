"""Jobs and their bids (ARCHITECTURE.md §Clearing, "Inputs")."""

from __future__ import annotations

import functools

from django.conf import settings
from django.db import models
from django.db.models import Max, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    ALLOCATED = "allocated", "Allocated"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


# States a job never leaves.
TERMINAL_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED)
# States in which the job holds a live lease.
LEASED_STATES = (JobState.ALLOCATED, JobState.RUNNING, JobState.PREEMPTING)


@functools.cache  # built once: Django copies an expression before resolving it into a query
def wait_mark_expression() -> Coalesce:
    """The newest round that has frozen (or ended without freezing), 0 before any: a job whose wait begins now
    is in no earlier round's book, so only rounds after this one count for it (market.selectors.waiting)."""
    from market.models.rounds import Round, RoundState  # rounds.py needs nothing from here; import at call

    newest = Round.objects.exclude(state=RoundState.OPEN).order_by("-pk").values("pk")[:1]
    return Coalesce(Subquery(newest), Value(0), output_field=models.BigIntegerField())


def wait_mark() -> int:
    """wait_mark_expression's value now (Job.wait_round's default)."""
    from market.models.rounds import Round, RoundState

    return int(Round.objects.exclude(state=RoundState.OPEN).aggregate(top=Max("pk"))["top"] or 0)


class Job(models.Model):
    """A gang of GPUs wanted for up to `max_seconds`, with a bid per acceptable GPU type.

    `limits` is the current bid: an ordered list of `{"gpu_type": name, "limit": micro-credits per GPU-hour}`,
    the first the most preferred. Every version, the first included, is kept in `Bid`; `bid_version` names
    the current one. `submitted_at` is kept when a preempted job returns to PENDING, so it keeps its place.

    `rounds_waited` is derived, not stored (market.selectors.waiting): `waited_before` rounds up to round
    `wait_round`, plus, while pending, every round after it that committed a book.
    """

    # Indexed by job_tenant_state, which leads with it.
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    submitter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=200)
    command = models.TextField()
    gpus = models.PositiveIntegerField()
    max_seconds = models.PositiveIntegerField()
    grace_seconds = models.PositiveIntegerField()
    limits = models.JSONField()
    # What the job asks per GPU for its cgroup limits (docs/jobs.md §What a job can see); None: the policy's
    # default (settings.JOB_CPUS_PER_GPU_DEFAULT, JOB_MEMORY_GB_PER_GPU_DEFAULT) when it is bound.
    cpus_per_gpu = models.DecimalField(max_digits=6, decimal_places=2, null=True, blank=True)
    memory_gb_per_gpu = models.DecimalField(max_digits=7, decimal_places=2, null=True, blank=True)
    bid_version = models.PositiveIntegerField(default=1)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    submitted_at = models.DateTimeField(default=timezone.now)
    waited_before = models.PositiveIntegerField(default=0, help_text="Rounds waited up to wait_round.")
    wait_round = models.BigIntegerField(default=wait_mark, help_text="Later rounds count (while pending).")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Idempotent submit: the key the client sent, a digest of its body, and the response it got.
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_digest = models.CharField(max_length=64, blank=True)
    first_response = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(fields=["tenant", "state"], name="job_tenant_state"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="job_tenant_idempotency_key",
            ),
            models.CheckConstraint(condition=models.Q(gpus__gte=1), name="job_gpus_positive"),
            models.CheckConstraint(condition=models.Q(max_seconds__gte=1), name="job_max_seconds_positive"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name}"


class Bid(models.Model):
    """One version of a job's bid; amendments add a version, nothing is overwritten."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="bids")
    version = models.PositiveIntegerField()
    limits = models.JSONField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job", "version"]
        constraints = [models.UniqueConstraint(fields=["job", "version"], name="bid_job_version")]

    def __str__(self) -> str:
        return f"bid v{self.version} of job {self.job_id}"
