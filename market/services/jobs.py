"""Job writes: submit (idempotent), amend the bid, cancel (docs/jobs.md).

Every function is keyword-only and atomic and writes an audit row when it changes something. Input is checked
here again whatever the caller checked: a bad value raises config.errors.PolicyError naming the field as
the API spells it (`bids[1].limit`); a refused action raises a JobError whose `code` the API reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import ROUND_UP, Decimal
from typing import Any, TypedDict

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.access import is_member, owner_or_manager
from accounts.audit import audit
from accounts.models import Tenant, User
from config import idempotency
from config.errors import PolicyError
from config.money import format_credits
from inventory.models import GpuType
from market.models import (
    LIVE_LEASE_STATES,
    TERMINAL_STATES,
    Bid,
    CommandKind,
    EndReason,
    Job,
    JobState,
    Lease,
)
from market.models.jobs import wait_mark_expression
from market.selectors.jobs import largest_gangs
from market.selectors.policy import current_fence, market_policy_cached
from market.selectors.spend_alerts import bid_block, worst_cost
from market.selectors.waiting import rounds_waited_of
from market.services.leases import lease_request_stop

NAME_MAX_CHARS = 200
IDEMPOTENCY_KEY_MAX_CHARS = idempotency.KEY_MAX_CHARS
MIN_SECONDS = 60
GRACE_MAX_SECONDS = 3600
# max_hours has at most 4 decimals; the fewest hours with them that make MIN_SECONDS: 0.0167.
HOURS_DECIMALS = 4
HOURS_MIN = (Decimal(MIN_SECONDS) / 3600).quantize(Decimal(1).scaleb(-HOURS_DECIMALS), rounding=ROUND_UP)

# What a value outside the limits reads as. The checks below raise these; the API's serializer gives them for
# what its fields check before calling the service (a blank, a bound, a value of the wrong kind), and the
# portal's forms go through that serializer: one message for one bad value at every door (issue 26 §4).
NOT_BLANK = "must be a non-blank string"
NOT_WHOLE = "must be a whole number"
NAME_TOO_LONG = f"must be at most {NAME_MAX_CHARS} characters"
TOO_FEW_GPUS = "must be at least 1"
TOO_FEW_HOURS = f"must be at least 1 minute ({HOURS_MIN} hours)"
GRACE_OUT_OF_RANGE = f"must be between 0 and {GRACE_MAX_SECONDS} seconds"


def too_many_hours() -> str:
    return f"must be at most {settings.JOB_MAX_HOURS} hours"  # the setting read when used: tests change it


class JobError(Exception):
    """Base of every refusal; `code` is what the API reports."""

    code = "job_error"


class NotPermitted(JobError):
    code = "permission_denied"


# The one refusal of a reused key (config/idempotency.py), under the name this module's callers know.
IdempotencyKeyReused = idempotency.IdempotencyKeyReused


class JobNotPending(JobError):
    code = "job_not_pending"


class JobFinished(JobError):
    code = "job_finished"


class TooManyPending(JobError):
    code = "too_many_pending"


class BidsPaused(JobError):
    """A spend alert of the tenant paused new bids (docs/alerts.md); the message names it and who lifts it."""

    code = "bids_paused"


class BidsCapped(JobError):
    """A spend alert of the tenant caps new bids and this one could pass the cap (docs/alerts.md)."""

    code = "bids_capped"


# Checks: each raises PolicyError(field, message) or returns the value to store. The public ones are also the
# API serializer's (market/api/jobs_serializers.py), which the portal's forms use too, so a rule and its
# message live here once (issue 26 §4).


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise PolicyError("name", NOT_BLANK)
    if len(name) > NAME_MAX_CHARS:
        raise PolicyError("name", NAME_TOO_LONG)
    return name


def check_command(command: object) -> str:
    if not isinstance(command, str) or not command.strip():
        raise PolicyError("command", NOT_BLANK)
    limit = settings.JOB_COMMAND_MAX_CHARS
    if len(command) > limit:
        raise PolicyError("command", f"is {len(command)} characters; at most {limit} are allowed")
    return command


def check_bid_count(count: int) -> None:
    """A bid names at least one GPU type (the serializer asks before it resolves the names)."""
    if count < 1:
        raise PolicyError("bids", "must name at least one GPU type")


def _check_bids(bids: Sequence[tuple[GpuType, int]]) -> list[dict[str, Any]]:
    """The bid as stored in Job.limits: [{"gpu_type": name, "limit": micro-credits per GPU-hour}, ...]."""
    check_bid_count(len(bids))
    seen: dict[int, int] = {}
    limits = []
    for i, (gpu_type, limit) in enumerate(bids):
        if gpu_type.pk in seen:
            raise PolicyError(
                f"bids[{i}].gpu_type", f"{gpu_type.name} is already in bids[{seen[gpu_type.pk]}]"
            )
        seen[gpu_type.pk] = i
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise PolicyError(f"bids[{i}].limit", "must be a whole number of micro-credits")
        if limit <= 0:
            raise PolicyError(f"bids[{i}].limit", "must be positive")
        if limit > gpu_type.max_price:
            raise PolicyError(
                f"bids[{i}].limit",
                f"{format_credits(limit)} credits is above the maximum price of {gpu_type.name} "
                f"({format_credits(gpu_type.max_price)} credits per GPU-hour)",
            )
        limits.append({"gpu_type": gpu_type.name, "limit": limit})
    return limits


def _check_gpus(gpus: object, gpu_types: Sequence[GpuType], *, field: str = "gpus") -> int:
    """At least 1 and at most the largest gang any of the accepted types can ever place."""
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise PolicyError(field, NOT_WHOLE)
    if gpus < 1:
        raise PolicyError(field, TOO_FEW_GPUS)
    largest = largest_gangs(gpu_types=gpu_types)
    best = max(gpu_types, key=lambda t: largest[t.pk])
    if gpus > largest[best.pk]:
        others = "".join(f"; {t.name}: {largest[t.pk]}" for t in gpu_types if t.pk != best.pk)
        raise PolicyError(
            field,
            f"{gpus} GPUs exceed the largest node group of {best.name} ({largest[best.pk]} GPUs{others})",
        )
    return gpus


def _check_max_seconds(max_seconds: object) -> int:
    top = settings.JOB_MAX_HOURS * 3600
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, int):
        raise PolicyError("max_hours", "must be a number of hours")
    if max_seconds < MIN_SECONDS:
        raise PolicyError("max_hours", TOO_FEW_HOURS)
    if max_seconds > top:
        raise PolicyError("max_hours", too_many_hours())
    return max_seconds


def _check_grace(grace_seconds: object) -> int:
    if grace_seconds is None:
        return market_policy_cached().default_grace_s
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int):
        raise PolicyError("grace_seconds", NOT_WHOLE)
    if not 0 <= grace_seconds <= GRACE_MAX_SECONDS:
        raise PolicyError("grace_seconds", GRACE_OUT_OF_RANGE)
    return grace_seconds


def _check_per_gpu(value: object, field: str, maximum: int, least: str) -> Decimal | None:
    """cpus_per_gpu and memory_gb_per_gpu: None (the policy's default at bind) or a positive number of at
    most two decimals, at most the policy's maximum (settings read when used: tests change them)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise PolicyError(field, "must be a number")
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise PolicyError(field, "must be a number") from None
    if not number.is_finite() or number != number.quantize(Decimal("0.01")):
        raise PolicyError(field, "must be a number with at most 2 decimals")
    if number < Decimal(least) or number > maximum:
        raise PolicyError(field, f"must be between {least} and {maximum}")
    return number.quantize(Decimal("0.01"))


def check_idempotency_key(key: object) -> str:
    """The one key rule (config/idempotency.check_key): "" means none."""
    return idempotency.check_key(key)


def _check_pending_limit(tenant: Tenant) -> None:
    """Every pending job is in every round's book: one tenant must not be able to slow every round down.
    A soft limit (two racing submits may both pass at the limit), which is all it needs to be."""
    cap = settings.JOB_MAX_PENDING_PER_TENANT
    if Job.objects.filter(tenant=tenant, state=JobState.PENDING).count() >= cap:
        raise TooManyPending(
            f"{tenant.slug} already has {cap} pending jobs, the most a tenant may have; cancel some or wait."
        )


class _JobFields(TypedDict):
    """A submit's checked values, as Job's columns."""

    name: str
    command: str
    limits: list[dict[str, Any]]
    gpus: int
    max_seconds: int
    grace_seconds: int
    cpus_per_gpu: Decimal | None
    memory_gb_per_gpu: Decimal | None


def _check_spend_alerts(
    tenant: Tenant, gpus: int, limits: list[dict[str, Any]], max_seconds: int, job_id: int | None = None
) -> None:
    """A new bid (a submit or an amend) against the tenant's blocking spend alerts. Its worst case is what
    its hold could ever become: every GPU for max hours at its highest limit."""
    block = bid_block(tenant=tenant, cost=worst_cost(gpus, limits, max_seconds), replacing=job_id)
    if block is not None:
        raise (BidsPaused if block.paused else BidsCapped)(block.message)


def _check_member(user: User, tenant: Tenant) -> None:
    if not is_member(user, tenant):
        raise NotPermitted("Only members of the tenant or platform admins may submit jobs.")


def _check_owner(user: User, job: Job) -> None:
    if not owner_or_manager(user, owner_id=job.submitter_id, tenant=job.tenant):
        raise NotPermitted("Only the job's submitter, the tenant's managers or platform admins may do this.")


# Idempotent submit.


def job_replay(*, tenant: Tenant, idempotency_key: str, request_digest: str) -> Job | None:
    """The job first submitted with this key, if any; IdempotencyKeyReused if its request differed."""
    return idempotency.replay(
        key=idempotency_key,
        found=_keyed_job(tenant, idempotency_key),
        same=lambda job: job.request_digest == request_digest,
        name=lambda job: f"job {job.pk}",
    )


def _keyed_job(tenant: Tenant, key: str) -> Job | None:
    if not key:
        return None
    return (
        Job.objects.select_related("tenant", "submitter").filter(tenant=tenant, idempotency_key=key).first()
    )


def job_submit(
    *,
    tenant: Tenant,
    submitter: User,
    name: str,
    command: str,
    gpus: int,
    bids: Sequence[tuple[GpuType, int]],
    max_seconds: int,
    grace_seconds: int | None,
    cpus_per_gpu: object = None,
    memory_gb_per_gpu: object = None,
    idempotency_key: str = "",
    request_digest: str = "",
    first_response: Callable[[Job], dict[str, Any]] | None = None,
    replay_checked: bool = False,
    member_checked: bool = False,
) -> tuple[Job, bool]:
    """Create a pending job with bid version 1; returns (job, created).

    With an idempotency key, a job already submitted under it (same tenant, same request digest) is returned
    with created=False and nothing is written; a different digest raises IdempotencyKeyReused. Two concurrent
    submits with one key meet on the unique index: the second waits for the first, its transaction fails and
    it re-reads. `first_response`, given a key, renders the response to store for replays, in the same
    transaction, so a replay never sees the job without it. `replay_checked`: no lookup first; a repeated key
    fails the insert on the unique index and is re-read then (the API looks the key up itself when a check
    refuses the body, so a replay is answered whatever today's checks say).
    `member_checked`: the caller authenticated with a token of this tenant, which already proved membership.
    """
    idempotency_key = check_idempotency_key(idempotency_key)
    if not replay_checked:
        found = job_replay(tenant=tenant, idempotency_key=idempotency_key, request_digest=request_digest)
        if found is not None:
            return found, False
    if not member_checked:
        _check_member(submitter, tenant)
    _check_pending_limit(tenant)
    fields: _JobFields = {
        "name": _check_name(name),
        "command": check_command(command),
        "limits": _check_bids(bids),
        "gpus": _check_gpus(gpus, [t for t, _ in bids]),
        "max_seconds": _check_max_seconds(max_seconds),
        "grace_seconds": _check_grace(grace_seconds),
        "cpus_per_gpu": _check_per_gpu(cpus_per_gpu, "cpus_per_gpu", settings.JOB_CPUS_PER_GPU_MAX, "0.1"),
        "memory_gb_per_gpu": _check_per_gpu(
            memory_gb_per_gpu, "memory_gb_per_gpu", settings.JOB_MEMORY_GB_PER_GPU_MAX, "0.25"
        ),
    }
    _check_spend_alerts(tenant, fields["gpus"], fields["limits"], fields["max_seconds"])
    # _job_create is its own transaction (a savepoint inside a caller's), so a repeated key fails it without
    # a savepoint round trip on every submit; the unique index makes the repeat wait for the first and fail.
    return idempotency.replay_or_create(
        key=idempotency_key,
        find=lambda: _keyed_job(tenant, idempotency_key),
        same=lambda job: job.request_digest == request_digest,
        name=lambda job: f"job {job.pk}",
        create=lambda: _job_create(
            tenant, submitter, idempotency_key, request_digest, first_response, fields
        ),
        look_first=False,  # looked up above (or by the caller, replay_checked)
    )


@transaction.atomic
def _job_create(
    tenant: Tenant,
    submitter: User,
    idempotency_key: str,
    request_digest: str,
    first_response: Callable[[Job], dict[str, Any]] | None,
    fields: _JobFields,
) -> Job:
    job = Job.objects.create(
        tenant=tenant,
        submitter=submitter,
        idempotency_key=idempotency_key,
        request_digest=request_digest if idempotency_key else "",
        wait_round=wait_mark_expression(),  # in the INSERT: no round trip of its own
        **fields,
    )
    # Its value stays in the database: left unloaded, it is read back only if something asks for it.
    del job.__dict__["wait_round"]
    job.rounds_waited = 0  # type: ignore[attr-defined]  # the annotation with_rounds_waited gives listed jobs; a new one has waited none
    Bid.objects.create(job=job, version=1, limits=job.limits, actor=submitter, created_at=job.submitted_at)
    if idempotency_key and first_response is not None:
        job.first_response = first_response(job)
        job.save(update_fields=["first_response"])
    audit(actor=submitter, tenant=tenant, action="job.submit", detail=_detail(job))
    return job


# Amend and cancel: the job row is locked, so they serialise with each other and with a round's commit.


class _LeaseAppeared(Exception):
    """A round gave the job a lease between taking its leases' locks and its own."""


def _lock(job: Job) -> Job:
    """The job, row-locked. Its live leases are locked first: lease_stopped and preemption take a lease and
    then its job, and taking them in the same order keeps a cancel from deadlocking with them. A round that
    commits between the two locks can give the job a lease this did not lock (the job was pending); taking that
    lease now would reverse the order, so the attempt is rolled back to its savepoint (which releases its row
    locks) and made again. While the job is locked no round can add another."""
    for _attempt in range(4):
        try:
            with transaction.atomic():
                return _lock_once(job, strict=True)
        except _LeaseAppeared:
            continue
    return _lock_once(job, strict=False)


def _lock_once(job: Job, *, strict: bool) -> Job:
    live = Lease.objects.select_for_update(no_key=True).filter(job_id=job.pk, state__in=LIVE_LEASE_STATES)
    locked = set(live.order_by("pk").values_list("pk", flat=True))
    # of=("self",): without it PostgreSQL would also lock the joined tenant and submitter rows, which every
    # submit and audit event touches (tests/faults/test_bank.py saw a deadlock on accounts_user when the lock
    # was a plain FOR UPDATE, which every insert's key check waits for; docs/rounds.md §Lock order).
    locked_job = (
        Job.objects.select_for_update(no_key=True, of=("self",))
        .select_related("tenant", "submitter")
        .get(pk=job.pk)
    )
    now_live = Lease.objects.filter(job_id=job.pk, state__in=LIVE_LEASE_STATES).values_list("pk", flat=True)
    if strict and not set(now_live) <= locked:  # read without a lock: taking it is what must not happen
        raise _LeaseAppeared
    return locked_job


@transaction.atomic
def bid_amend(*, job: Job, actor: User, bids: Sequence[tuple[GpuType, int]]) -> Job:
    """Replace the bid of a pending job with version n+1; every earlier version stays in Bid."""
    job = _lock(job)
    _check_owner(actor, job)
    if job.state != JobState.PENDING:
        raise JobNotPending(f"Job {job.pk} is {job.state}; only a pending job's bid can change.")
    limits = _check_bids(bids)
    _check_gpus(job.gpus, [t for t, _ in bids], field="bids")
    _check_spend_alerts(job.tenant, job.gpus, limits, job.max_seconds, job.pk)
    job.limits, job.bid_version = limits, job.bid_version + 1
    job.save(update_fields=["limits", "bid_version", "updated_at"])
    Bid.objects.create(job=job, version=job.bid_version, limits=limits, actor=actor)
    audit(actor=actor, tenant=job.tenant, action="job.bid_amend", detail=_detail(job))
    return job


@transaction.atomic
def job_cancel(*, job: Job, actor: User) -> Job:
    """Cancel a job: at once while pending; through its leases while it runs (docs/jobs.md §Lifecycle).

    A running or allocated job's leases get a release command; lease_stopped settles them and, seeing
    cancel_requested_at, ends the job CANCELLED. A preempting job's lease is already stopping: lease_stopped
    will end it CANCELLED instead of re-queueing it. Cancelling again changes nothing.
    """
    job = _lock(job)
    _check_owner(actor, job)
    if job.state == JobState.CANCELLED or job.cancel_requested_at is not None:
        return job
    if job.state in TERMINAL_STATES:
        raise JobFinished(f"Job {job.pk} has already ended ({job.state}).")
    now = timezone.now()
    job.cancel_requested_at = now
    fields = ["cancel_requested_at", "updated_at"]
    if job.state == JobState.PENDING:
        # Its count stops here: what it had waited becomes its stored count (market.selectors.waiting).
        job.waited_before = rounds_waited_of(job)
        job.state, job.ended_at = JobState.CANCELLED, now
        fields += ["state", "ended_at", "waited_before"]
    job.save(update_fields=fields)
    if job.state in (JobState.ALLOCATED, JobState.RUNNING):
        fence = current_fence()
        for lease_id in Lease.objects.filter(job=job, state__in=LIVE_LEASE_STATES).values_list(
            "pk", flat=True
        ):
            lease_request_stop(
                lease_id=lease_id, kind=CommandKind.RELEASE, reason=EndReason.CANCELLED, fence=fence, now=now
            )
    audit(actor=actor, tenant=job.tenant, action="job.cancel", detail=_detail(job))
    return job


def _detail(job: Job) -> dict[str, Any]:
    return {
        "job": job.pk,
        "name": job.name,
        "state": job.state,
        "gpus": job.gpus,
        "bid_version": job.bid_version,
        "limits": job.limits,
    }
