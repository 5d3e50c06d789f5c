"""Jobs API shapes. Prices travel as integer micro-credits per GPU-hour with credit strings alongside; request
bodies give them in credits as decimal strings, like the ledger API, and hours as decimal strings too."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.api import BodySerializer, QuerySerializer
from config.errors import PolicyError
from config.fields import AnyField, DecimalStringField, TextField
from config.money import format_credits
from inventory.models import GpuType
from market.api.ledger_serializers import CreditsField
from market.models import Bid, BidOutcome, Job, JobState, JournalEntry, Lease, LeaseGpu, PreemptReason
from market.selectors.explain import explain_outcomes, preemption_sentence, queue_places
from market.selectors.holds import hold_ends_at
from market.selectors.jobs import gpu_types_by_name
from market.selectors.lease_parts import lease_part_views
from market.selectors.lost_work import gpu_time
from market.selectors.preemptions import preemption_of
from market.selectors.reservations import job_placement
from market.selectors.speed import TypeSpeed
from market.selectors.usage import job_log_tail, usage_combined
from market.selectors.waiting import rounds_waited
from market.services.jobs import (
    GRACE_MAX_SECONDS,
    GRACE_OUT_OF_RANGE,
    HOURS_DECIMALS,
    HOURS_MIN,
    NAME_MAX_CHARS,
    NAME_TOO_LONG,
    NOT_BLANK,
    NOT_WHOLE,
    TOO_FEW_GPUS,
    TOO_FEW_HOURS,
    check_bid_count,
    check_command,
    too_many_hours,
)

if TYPE_CHECKING:
    from django.db.models import Model

    from accounts.models import Tenant, User
    from market.models import Hold

T = TypeVar("T")


# Requests


class PerGpuField(DecimalStringField[Decimal]):
    """A job's CPUs or memory (GB) per GPU: at most 2 decimals, from `low` to the setting named `maximum`
    (read when used: tests change it), as config/fields.DecimalStringField takes it."""

    example = "8"

    def __init__(self, maximum: str, low: Decimal, **kwargs: Any) -> None:
        self.maximum = maximum
        super().__init__(places=2, low=low, high=Decimal(getattr(settings, maximum)), **kwargs)

    def bounds(self) -> tuple[Decimal, Decimal]:
        return self.low, Decimal(getattr(settings, self.maximum))


class HoursField(DecimalStringField[int]):
    """Hours as a decimal string ("1.5") or a JSON number (1.5), at most 4 decimals, from HOURS_MIN (a minute)
    to JOB_MAX_HOURS (config/fields.DecimalStringField); becomes whole seconds, rounded half up."""

    example = "1.5"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(places=HOURS_DECIMALS, low=HOURS_MIN, high=Decimal(settings.JOB_MAX_HOURS), **kwargs)

    def bounds(self) -> tuple[Decimal, Decimal]:
        return HOURS_MIN, Decimal(settings.JOB_MAX_HOURS)  # read when used: tests change the setting

    def to_internal_value(self, data: Any) -> int:
        hours = super().to_internal_value(data)
        return int((hours * 3600).to_integral_value(rounding=ROUND_HALF_UP))

    def too_low(self, low: Decimal) -> str:
        return TOO_FEW_HOURS

    def too_high(self, high: Decimal) -> str:
        return too_many_hours()

    def to_representation(self, value: int) -> str:
        return hours_text(value)


def hours_text(seconds: int) -> str:
    """Seconds as hours with at most 4 decimals, without trailing zeros ("1.5", "0.0167", "24")."""
    hours = (Decimal(seconds) / 3600).quantize(Decimal(1).scaleb(-HOURS_DECIMALS), rounding=ROUND_HALF_UP)
    text = f"{hours:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class BidEntrySerializer(BodySerializer):
    gpu_type = TextField(max_length=64, help_text="A GPU type's name, e.g. H100.")
    limit = CreditsField(
        help_text='Most you will pay, credits per GPU-hour, e.g. "4.5" (at most 6 decimals).'
    )


class BidsField(serializers.ListSerializer[object]):
    """The preference-ordered bid entries, with each type name resolved to its GpuType (one query).

    Gives [(GpuType, micro-credits), ...]. Errors name the entry (`bids[1].limit`): DRF's own list errors
    are keyed by index, which would read `bids.1.limit`. Duplicates and price bounds are the service's to
    check (it checks them for every caller).
    """

    child: BidEntrySerializer  # always one (the base types it optional)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=BidEntrySerializer(), allow_empty=False, **kwargs)

    def to_internal_value(self, data: Any) -> list[tuple[GpuType, int]]:
        if not isinstance(data, list):
            raise serializers.ValidationError("must be a list of {gpu_type, limit} objects")
        _service_check(check_bid_count, len(data))
        types = gpu_types_by_name()
        if len(data) > len(types):
            raise serializers.ValidationError(
                f"has {len(data)} entries but only {len(types)} GPU types exist"
            )
        entries: list[dict[str, Any]] = []
        errors: list[Any] = []
        for item in data:
            if not isinstance(item, dict):
                entries.append({})
                errors.append(["must be an object {gpu_type, limit}"])
                continue
            try:
                entry = self.child.run_validation(item)
            except serializers.ValidationError as exc:
                entries.append({})
                errors.append(exc.detail)
                continue
            entries.append(entry)
            known = entry["gpu_type"] in types
            errors.append({} if known else {"gpu_type": [_unknown_type(entry["gpu_type"], types)]})
        if any(errors):
            raise serializers.ValidationError(errors)
        return [(types[e["gpu_type"]], e["limit"]) for e in entries]


def _service_check(check: Callable[[Any], T], value: Any) -> T:
    """Run one of the job service's checks (the rule and its message live there) and give its refusal as this
    field's error: the serializer names the field, the message is the service's."""
    try:
        return check(value)
    except PolicyError as exc:
        raise serializers.ValidationError(exc.message) from exc


def _unknown_type(name: str, types: dict[str, GpuType]) -> str:
    return f"unknown GPU type {name!r}; known: {', '.join(sorted(types)) or 'none'}"


class JobSubmitSerializer(BodySerializer):
    """Body of a submit. Fields not listed here are ignored."""

    # The fields' own checks (blank, bounds, kind) read as the service's (market.services.jobs).
    name = TextField(
        max_length=NAME_MAX_CHARS, error_messages={"blank": NOT_BLANK, "max_length": NAME_TOO_LONG}
    )
    command = TextField(
        trim_whitespace=False,
        error_messages={"blank": NOT_BLANK},
        help_text="What the agent runs; at most JOB_COMMAND_MAX_CHARS characters (8192 by default).",
    )
    gpus = serializers.IntegerField(
        min_value=1,
        error_messages={"min_value": TOO_FEW_GPUS, "invalid": NOT_WHOLE},
        help_text="GPUs wanted as one gang; at most the largest node group of an accepted type.",
    )
    bids = BidsField(help_text="Acceptable GPU types with a limit price each, most preferred first.")
    max_hours = HoursField(help_text="Longest the job may run, hours (> 0, at least 1 minute, 4 decimals).")
    grace_seconds = serializers.IntegerField(
        min_value=0,
        max_value=GRACE_MAX_SECONDS,
        error_messages={
            "min_value": GRACE_OUT_OF_RANGE,
            "max_value": GRACE_OUT_OF_RANGE,
            "invalid": NOT_WHOLE,
        },
        required=False,
        allow_null=True,
        help_text="SIGTERM to SIGKILL on preemption or cancel; the market's default when left out.",
    )

    cpus_per_gpu = PerGpuField(
        "JOB_CPUS_PER_GPU_MAX",
        Decimal("0.1"),
        required=False,
        allow_null=True,
        help_text="CPU cores per GPU for the job's cgroup, 0.1 to JOB_CPUS_PER_GPU_MAX (docs/jobs.md §What a job "
        "can see); the policy's default when left out.",
    )
    memory_gb_per_gpu = PerGpuField(
        "JOB_MEMORY_GB_PER_GPU_MAX",
        Decimal("0.25"),
        required=False,
        allow_null=True,
        help_text="Memory (GB) per GPU for the job's cgroup, 0.25 to JOB_MEMORY_GB_PER_GPU_MAX: over it the kernel "
        "kills the job, said as out of memory; the policy's default when left out.",
    )

    def validate_command(self, value: str) -> str:
        return _service_check(check_command, value)


class BidAmendSerializer(BodySerializer):
    bids = BidsField(help_text="The new bid, replacing the current one: most preferred type first.")


_STATE = "|".join(JobState.values)


class JobFilterSerializer(QuerySerializer):
    state = TextField(
        required=False,
        pattern=f"(?:{_STATE})(?:,(?:{_STATE}))*",
        pattern_message=f"must be one or more of {', '.join(JobState.values)}, comma-separated",
        help_text=f"One state or several, comma-separated without spaces: {', '.join(JobState.values)}.",
    )
    gpu_type = TextField(required=False, help_text="Jobs whose current bid accepts this type.")
    submitter = TextField(
        required=False, max_length=150, validators=[UnicodeUsernameValidator()], help_text="A username."
    )

    def validate_state(self, value: str) -> list[str]:
        return value.split(",")

    def validate_gpu_type(self, value: str) -> str:
        types = gpu_types_by_name()
        if value not in types:
            raise serializers.ValidationError(_unknown_type(value, types))
        return value


# Responses


class LimitSerializer(serializers.Serializer[object]):
    gpu_type = serializers.CharField()
    limit = serializers.IntegerField(help_text="Micro-credits per GPU-hour.")
    limit_credits = serializers.SerializerMethodField()

    def get_limit_credits(self, entry: dict[str, Any]) -> str:
        return format_credits(entry["limit"])


class JobSerializer(serializers.ModelSerializer[Job]):
    """A job with its current bid. `warnings` names bid entries that cannot win as they stand (a limit below
    the type's reserve price)."""

    # The views pass the GPU types as context["gpu_types"] ({name: GpuType}): one query for a whole page.

    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitter: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    max_hours = serializers.SerializerMethodField()
    bids = LimitSerializer(many=True, source="limits", read_only=True)
    warnings = serializers.SerializerMethodField()
    rounds_waited = serializers.SerializerMethodField(
        help_text="Rounds this job has waited (docs/rounds.md §Rounds waited)."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "tenant",
            "submitter",
            "name",
            "command",
            "gpus",
            "max_hours",
            "max_seconds",
            "grace_seconds",
            "cpus_per_gpu",
            "memory_gb_per_gpu",
            "state",
            "bid_version",
            "bids",
            "warnings",
            "submitted_at",
            "rounds_waited",
            "cancel_requested_at",
            "ended_at",
            "updated_at",
        ]
        read_only_fields = fields

    # Each class's own built fields (see get_fields), set on first use: declared, not assigned, so that a
    # subclass does not find its parent's in its __dict__.
    _built_fields: ClassVar[dict[str, AnyField]]

    def get_fields(self) -> dict[str, AnyField]:
        # ModelSerializer builds every field from the model again on each use, a fifth of a submit's own work
        # (bench/api.py). The fields depend only on the class, so each class builds them once and each use
        # gets a copy, as DRF copies declared fields.
        cls = type(self)
        if "_built_fields" not in cls.__dict__:
            cls._built_fields = super().get_fields()
        return copy.deepcopy(cls._built_fields)

    def get_max_hours(self, job: Job) -> str:
        return hours_text(job.max_seconds)

    def get_rounds_waited(self, job: Job) -> int:
        return rounds_waited(job)

    def get_warnings(self, job: Job) -> list[str]:
        if "gpu_types" not in self.context:
            self.context["gpu_types"] = gpu_types_by_name()
        return bid_warnings(job.limits, self.context["gpu_types"])


def bid_warnings(limits: list[dict[str, Any]], types: dict[str, GpuType]) -> list[str]:
    out = []
    for i, entry in enumerate(limits):
        gpu_type = types.get(entry["gpu_type"])
        if gpu_type is not None and entry["limit"] < gpu_type.reserve_price:
            out.append(
                f"bids[{i}].limit: {format_credits(entry['limit'])} credits is below the reserve price of "
                f"{gpu_type.name} ({format_credits(gpu_type.reserve_price)} credits); this entry will lose "
                f"with reason below_reserve"
            )
    return out


class BidVersionSerializer(serializers.ModelSerializer[Bid]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    bids = LimitSerializer(many=True, source="limits", read_only=True)

    class Meta:
        model = Bid
        fields = ["version", "bids", "actor", "created_at"]
        read_only_fields = fields


class OutcomeSerializer(serializers.ModelSerializer[BidOutcome]):
    round = serializers.IntegerField(source="round_id", read_only=True)
    gpu_type: serializers.SlugRelatedField[GpuType] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    price_credits = serializers.SerializerMethodField()
    would_have_won = serializers.SerializerMethodField(
        help_text="For reason outbid: the price that would have won (micro-credits per GPU-hour)."
    )
    would_have_won_credits = serializers.SerializerMethodField()
    text = serializers.SerializerMethodField(
        help_text="Why, in one sentence, with the figures the round stored (the job page's sentence)."
    )

    class Meta:
        model = BidOutcome
        fields = [
            "round",
            "bid_version",
            "won",
            "tier",
            "gpu_type",
            "price",
            "price_credits",
            "reason",
            "figure",
            "would_have_won",
            "would_have_won_credits",
            "text",
        ]
        read_only_fields = fields

    def get_price_credits(self, outcome: BidOutcome) -> str | None:
        return None if outcome.price is None else format_credits(outcome.price)

    def get_would_have_won(self, outcome: BidOutcome) -> int | None:
        return outcome.figure if outcome.reason == "outbid" else None

    def get_text(self, outcome: BidOutcome) -> str:
        # Set by JobDetailSerializer for the outcomes it shows (explain_outcomes reads their rounds in one go).
        texts: dict[int, str] = self.context.get("outcome_text", {})
        return texts.get(outcome.pk, "")

    def get_would_have_won_credits(self, outcome: BidOutcome) -> str | None:
        figure = self.get_would_have_won(outcome)
        return None if figure is None else format_credits(figure)


class LeaseGpuSerializer(serializers.ModelSerializer[LeaseGpu]):
    index = serializers.IntegerField(source="gpu.index", read_only=True)
    uuid = serializers.CharField(source="gpu.uuid", read_only=True)

    class Meta:
        model = LeaseGpu
        fields = ["index", "uuid", "active"]
        read_only_fields = fields


class LeaseUsageSerializer(serializers.Serializer[object]):
    """What the node agents measured, cumulative from the job's start, summed over the gang's nodes."""

    gpu_seconds = serializers.FloatField(help_text="GPUs held x seconds: what the lease is charged for.")
    energy_j = serializers.FloatField()
    util_avg = serializers.FloatField(help_text="Mean GPU utilisation, percent.")
    util_max = serializers.FloatField()
    mem_avg_mb = serializers.FloatField()
    mem_max_mb = serializers.FloatField()
    samples = serializers.IntegerField()


class PreemptionSerializer(serializers.Serializer[object]):
    """Why a round preempted the lease (market.selectors.preemptions.Preemption). The job it made room for is
    behind the tenant wall: its id only when it is this tenant's own job, or for a platform admin, who also
    sees its tenant."""

    reason = serializers.ChoiceField(
        choices=PreemptReason.choices,
        help_text="The allocator's rule: reclaim_guarantee (another tenant's guarantee) or fair_share "
        "(another tenant's entitlement, fair reclaim).",
    )
    label = serializers.CharField(help_text='The rule in words, e.g. "Guarantee reclaim".')  # type: ignore[assignment]  # the stubs see Field.label; DRF's metaclass takes declared fields off the class
    round = serializers.IntegerField(help_text="The round that preempted it.")
    for_own_tenant = serializers.BooleanField(help_text="Whether the job it made room for is this tenant's.")
    for_job = serializers.IntegerField(
        allow_null=True, help_text="That job: when it is this tenant's own, or for a platform admin."
    )
    for_tenant = serializers.CharField(allow_null=True, help_text="That job's tenant: platform admins only.")
    text = serializers.CharField(
        help_text="The round, the rule, whom it was for and the work it lost, in one sentence."
    )
    lost_gpu_s = serializers.FloatField(
        allow_null=True,
        help_text="GPU-seconds of work the preemption threw away: the lease's GPUs times the seconds from the "
        "later of its job's start and its last checkpoint to the round. Null on leases preempted before it "
        "was recorded.",
    )
    lost_gpu_hours = serializers.FloatField(allow_null=True, help_text="The same in GPU-hours (4 decimals).")
    lost_work = serializers.CharField(
        help_text='The same in a unit that reads ("12 GPU-minutes"); empty where not recorded.'
    )


class LeasePartSerializer(serializers.Serializer[object]):
    """market.selectors.lease_parts.PartView: one node's part of the lease (docs/jobs.md §Multi-node jobs)."""

    rank = serializers.IntegerField(help_text="0 hosts the rendezvous.")
    node = serializers.CharField()
    state = serializers.CharField(
        help_text='"starting" (its bind waits for the agent), "running", "exited", "refused" (could not '
        'start), "lost" (its node went down), or "not started" (the lease ended first).'
    )
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    signal = serializers.IntegerField(allow_null=True)
    text = serializers.CharField(help_text='One sentence, e.g. "part 1 on node gpu-b exited with code 3".')
    log_tail = serializers.CharField(
        help_text="The last 64 KiB of this part's output, as its agent reported it."
    )


class LeaseSerializer(serializers.ModelSerializer[Lease]):
    node: serializers.SlugRelatedField[Model] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    gpu_type: serializers.SlugRelatedField[GpuType] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    bound_gpus = LeaseGpuSerializer(many=True, source="gpus_bound", read_only=True)
    price_credits = serializers.SerializerMethodField()
    hold_amount = serializers.SerializerMethodField(help_text="Micro-credits held for this lease.")
    hold_amount_credits = serializers.SerializerMethodField()
    charged_credits = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    hold_ends_at = serializers.SerializerMethodField(
        help_text="When a hold sized by prediction runs out (null: it covers max hours)."
    )
    preemption = serializers.SerializerMethodField(
        help_text="Why a round preempted it (end_reason preempted); null otherwise, and for leases preempted "
        "before reasons were recorded."
    )
    exit_code = serializers.SerializerMethodField(
        help_text="The job's exit code on this lease as its agents reported it (a gang: the first nonzero "
        "one); null while it runs, or when it was stopped by a signal."
    )
    parts = serializers.SerializerMethodField(
        help_text="One per node, in rank order: a gang on several nodes has several, every other lease one."
    )

    class Meta:
        model = Lease
        fields = [
            "id",
            "round",
            "node",
            "gpu_type",
            "gpus",
            "bound_gpus",
            "tier",
            "preemptible",
            "price",
            "price_credits",
            "hold_amount",
            "hold_amount_credits",
            "state",
            "started_at",
            "running_at",
            "stop_requested_at",
            "ended_at",
            "end_reason",
            "end_detail",
            "parts",
            "last_checkpoint_at",
            "charged",
            "charged_credits",
            "usage",
            "hold_seconds",
            "hold_extensions",
            "hold_warned_at",
            "hold_ends_at",
            "preemption",
            "exit_code",
        ]
        read_only_fields = fields

    def get_exit_code(self, lease: Lease) -> int | None:
        codes = [r.exit_code for r in getattr(lease, "usage_rows", None) or [] if r.exit_code is not None]
        return next((c for c in codes if c != 0), 0) if codes else None

    @extend_schema_field(LeasePartSerializer(many=True))
    def get_parts(self, lease: Lease) -> list[dict[str, Any]]:
        return [dict(LeasePartSerializer(view).data) for view in lease_part_views(lease)]

    @extend_schema_field(PreemptionSerializer(allow_null=True))
    def get_preemption(self, lease: Lease) -> dict[str, Any] | None:
        # context["admin"]: the viewer is a platform admin (market.api.jobs.JobDetailView).
        admin = bool(self.context.get("admin"))
        found = preemption_of(lease, admin=admin)
        if found is None or found.round is None:
            return None
        text = preemption_sentence(lease, admin=admin)
        lost = lease.lost_gpu_s
        return dict(
            PreemptionSerializer(
                {
                    **asdict(found),
                    "text": text,
                    "lost_gpu_s": lost,
                    "lost_gpu_hours": None if lost is None else round(lost / 3600, 4),
                    "lost_work": "" if lost is None else gpu_time(lost),
                }
            ).data
        )

    @extend_schema_field(LeaseUsageSerializer(allow_null=True))
    def get_usage(self, lease: Lease) -> dict[str, Any] | None:
        rows = getattr(lease, "usage_rows", None)
        return dict(LeaseUsageSerializer(usage_combined(rows)).data) if rows else None

    def get_hold_ends_at(self, lease: Lease) -> datetime | None:
        return hold_ends_at(lease)

    def get_price_credits(self, lease: Lease) -> str:
        return format_credits(lease.price)

    def get_hold_amount(self, lease: Lease) -> int | None:
        return getattr(lease, "hold_amount", None)

    def get_hold_amount_credits(self, lease: Lease) -> str | None:
        amount = self.get_hold_amount(lease)
        return None if amount is None else format_credits(amount)

    def get_charged_credits(self, lease: Lease) -> str | None:
        return None if lease.charged is None else format_credits(lease.charged)


class ChargeSerializer(serializers.ModelSerializer[JournalEntry]):
    """A ledger entry of one of the job's holds. `amount`: for a hold what it held, for a settle what it
    charged; `released`: what went back to available (the rest of the hold at settle, all of it at release)."""

    lease = serializers.SerializerMethodField()
    hold: serializers.SlugRelatedField[Hold] = serializers.SlugRelatedField(slug_field="key", read_only=True)
    amount = serializers.SerializerMethodField()
    amount_credits = serializers.SerializerMethodField()
    released = serializers.SerializerMethodField()
    released_credits = serializers.SerializerMethodField()

    class Meta:
        model = JournalEntry
        fields = [
            "id",
            "kind",
            "key",
            "lease",
            "hold",
            "amount",
            "amount_credits",
            "released",
            "released_credits",
            "created_at",
        ]
        read_only_fields = fields

    def get_lease(self, entry: JournalEntry) -> int:
        return int(entry.lease_id or 0)  # set on each entry by market.selectors.jobs.hold_entries

    def _share(self, entry: JournalEntry) -> int:
        # The lease's part of its hold (market.selectors.jobs.hold_entries): a round's hold is the tenant's.
        held = entry.hold.amount if entry.hold is not None else entry.amount
        return int(getattr(entry, "share", held))

    def get_amount(self, entry: JournalEntry) -> int:
        # A hold entry shows what it moved for this lease: the first one its share, an extension what it added.
        shown = int(getattr(entry, "shown", entry.amount))
        return {"hold": shown, "settle": min(entry.amount, self._share(entry)), "release": 0}.get(
            entry.kind, entry.amount
        )

    def get_amount_credits(self, entry: JournalEntry) -> str:
        return format_credits(self.get_amount(entry))

    def get_released(self, entry: JournalEntry) -> int:
        if entry.kind not in ("settle", "release") or entry.hold is None:
            return 0
        return self._share(entry) - self.get_amount(entry)

    def get_released_credits(self, entry: JournalEntry) -> str:
        return format_credits(self.get_released(entry))


class RuntimePredictionSerializer(serializers.Serializer[object]):
    """allocator.predict.Prediction: runtimes of the similar finished jobs that ran at least `done_seconds`."""

    median_seconds = serializers.FloatField(source="median_s")
    p90_seconds = serializers.FloatField(source="p90_s", help_text="90% of the similar jobs finished within.")
    remaining_median_seconds = serializers.FloatField(source="remaining_median_s")
    remaining_p90_seconds = serializers.FloatField(source="remaining_p90_s")
    basis_jobs = serializers.IntegerField(source="basis", help_text="How many similar finished jobs.")
    match = serializers.CharField(
        source="level_name", help_text='How similar, e.g. "same team, same job name".'
    )


class StartEstimateSerializer(serializers.Serializer[object]):
    gpu_type = serializers.CharField()
    at = serializers.DateTimeField(allow_null=True, help_text="Estimated start; null when none can be given.")
    text = serializers.CharField(help_text="The estimate and what it is based on.")


class TypeSpeedSerializer(serializers.Serializer[object]):
    """market.selectors.speed.TypeSpeed: one GPU type for this job, against the first choice of its bid."""

    gpu_type = serializers.CharField()
    speed_factor = serializers.FloatField(
        source="factor.factor",
        allow_null=True,
        help_text="Speed relative to the reference type (2.0: half the runtime); null at cold start.",
    )
    speed_low = serializers.SerializerMethodField(help_text="Lower end of the factor's 90% interval.")
    speed_high = serializers.SerializerMethodField(help_text="Upper end of the factor's 90% interval.")
    confidence = serializers.CharField(
        source="factor.confidence", help_text="reference, high, medium, low, or none (cold start)."
    )
    basis_runs = serializers.IntegerField(
        source="factor.runs", help_text="Runs of similar jobs on this type the factor compares."
    )
    reference_runs = serializers.IntegerField(
        source="factor.reference_runs", help_text="Runs of those similar jobs on the reference type."
    )
    match = serializers.CharField(
        source="factor.level_name",
        help_text='How similar, e.g. "same team, same job name"; empty at cold start.',
    )
    via = serializers.CharField(
        source="factor.via",
        allow_null=True,
        help_text="The third type the speed was compared through, when no run pairs this type with the reference.",
    )
    runtime_seconds = serializers.FloatField(
        source="runtime_s",
        allow_null=True,
        help_text="Estimated runtime of the whole job on this type (not what is left of a running one).",
    )
    runtime_p90_seconds = serializers.FloatField(
        source="runtime_p90_s", allow_null=True, help_text="90% of similar jobs would finish within, here."
    )
    posted_price = serializers.IntegerField(source="posted", help_text="Micro-credits per GPU-hour now.")
    cost = serializers.IntegerField(
        allow_null=True, help_text="Micro-credits: GPUs x the runtime x the posted price."
    )
    suggested_limit = serializers.IntegerField(
        allow_null=True,
        help_text="Micro-credits per GPU-hour that cost the same per unit of work as the reference limit.",
    )
    limit_clipped = serializers.CharField(
        allow_null=True, help_text='"reserve" or "max" when the same-work limit fell outside the bounds.'
    )
    text = serializers.CharField()

    def _interval(self, row: TypeSpeed, end: int) -> float | None:
        interval = row.factor.interval
        return None if interval is None else interval[end]

    def get_speed_low(self, row: TypeSpeed) -> float | None:
        return self._interval(row, 0)

    def get_speed_high(self, row: TypeSpeed) -> float | None:
        return self._interval(row, 1)


class SpeedGuideSerializer(serializers.Serializer[object]):
    """market.selectors.speed.SpeedGuide: every GPU type's speed, runtime, cost and same-work limit."""

    reference = serializers.CharField(help_text="The bid's first GPU type; speeds are relative to it.")
    reference_limit = serializers.IntegerField(help_text="The bid's limit on it, micro-credits per GPU-hour.")
    reference_runtime_seconds = serializers.FloatField(
        source="reference_median_s", allow_null=True, help_text="Median runtime on the reference type."
    )
    runtime_basis_runs = serializers.IntegerField(source="median_basis")
    types = TypeSpeedSerializer(source="rows", many=True)
    text = serializers.CharField()


class EstimateSerializer(serializers.Serializer[object]):
    """market.selectors.job_estimate.Estimate: what the job will likely take and cost, and when it may start."""

    prediction = RuntimePredictionSerializer(
        source="runtime.prediction", allow_null=True, help_text="Null: too few similar finished jobs."
    )
    prediction_text = serializers.CharField(source="runtime.text")
    done_seconds = serializers.FloatField(source="runtime.done_s", help_text="Work done by earlier leases.")
    price = serializers.IntegerField(
        allow_null=True, help_text="Micro-credits per GPU-hour the cost assumes."
    )
    cost = serializers.IntegerField(allow_null=True, help_text="Micro-credits for the predicted median.")
    cost_p90 = serializers.IntegerField(allow_null=True)
    cost_text = serializers.CharField()
    starts = StartEstimateSerializer(many=True, help_text="Per GPU type of a pending job's bid.")
    speeds = SpeedGuideSerializer(
        allow_null=True, help_text="Per GPU type, against the bid's first type; null when it has none."
    )


class JobListItemSerializer(JobSerializer):
    """A job in a list, with what a queue view shows: its newest lease's tier and node and, while it waits,
    why its newest round did not run it (context["notes"]: market.selectors.job_notes.job_notes)."""

    tier = serializers.SerializerMethodField(help_text="G, B or S: its newest lease's tier; null before one.")
    node = serializers.SerializerMethodField(help_text="Its newest lease's node; null before one.")
    reason = serializers.SerializerMethodField(
        help_text="A pending job: why its newest round did not run it, in one sentence; empty otherwise."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "tier", "node", "reason"]
        read_only_fields = fields

    def _note(self, job: Job) -> Any:
        return self.context["notes"].get(job.pk)

    def get_tier(self, job: Job) -> str | None:
        note = self._note(job)
        return None if note is None else note.tier

    def get_node(self, job: Job) -> str | None:
        note = self._note(job)
        return None if note is None else note.node

    def get_reason(self, job: Job) -> str:
        note = self._note(job)
        return "" if note is None else str(note.reason)


class QueuePlaceSerializer(serializers.Serializer[object]):
    """market.selectors.explain.QueuePlace: where a pending job stands for one GPU type of its bid."""

    gpu_type = serializers.CharField()
    limit = serializers.IntegerField(help_text="The bid's limit for this type, micro-credits per GPU-hour.")
    position = serializers.IntegerField(help_text="1: first in the market order for this type.")
    gpus_ahead = serializers.IntegerField(help_text="GPUs the pending bids before it ask for.")


class PlacementSerializer(serializers.Serializer[Any]):
    """What a waiting gang waits for, or how a running job was placed (market.selectors.reservations)."""

    kind = serializers.CharField(
        help_text="reserved (nodes held for this gang), waiting_nodes (no node fits it, none reserved yet), "
        "backfilled (started on a node held for a gang; preempted first if it runs past its prediction), "
        "moved (moved to other GPUs for a gang), or empty."
    )
    text = serializers.CharField()
    reserved_nodes = serializers.ListField(child=serializers.CharField())
    expected_start = serializers.DateTimeField(
        allow_null=True, help_text="When the reserved nodes are expected to be free (predicted)."
    )


class JobDetailSerializer(JobSerializer):
    """A job with every version of its bid, its round outcomes (the latest 100, newest first, and how many
    there are), its leases and the ledger entries of their holds."""

    # Reads the attributes market.selectors.jobs.job_detail sets on the job.

    bid_history = BidVersionSerializer(many=True, source="history", read_only=True)
    outcomes_count = serializers.IntegerField(read_only=True)
    outcomes = OutcomeSerializer(many=True, source="latest_outcomes", read_only=True)
    leases = LeaseSerializer(many=True, source="lease_rows", read_only=True)
    charges = ChargeSerializer(many=True, read_only=True)
    log_tail = serializers.SerializerMethodField(
        help_text="The last 64 KiB of the job's output, from its newest lease that reported any."
    )
    estimate = EstimateSerializer(
        read_only=True,
        allow_null=True,
        help_text="Predicted runtime, cost and start (docs/predictions.md); null for an ended job.",
    )
    queue = serializers.SerializerMethodField(
        help_text="A pending job's place in the market order per GPU type of its bid; empty otherwise."
    )
    reason = serializers.SerializerMethodField(
        help_text="Why its newest round did not run it (or what it won), in one sentence; empty before any."
    )
    placement = serializers.SerializerMethodField(
        help_text="What a waiting gang waits for (reserved nodes and expected start, or the rule that keeps "
        "it waiting), or whether a running job was backfilled or moved (docs/portal.md)."
    )

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "bid_history",
            "outcomes_count",
            "outcomes",
            "leases",
            "charges",
            "log_tail",
            "estimate",
            "queue",
            "reason",
            "placement",
        ]
        read_only_fields = fields

    @extend_schema_field(QueuePlaceSerializer(many=True))
    def get_queue(self, job: Job) -> list[dict[str, Any]]:
        return [dict(QueuePlaceSerializer(asdict(place)).data) for place in queue_places(job)]

    def get_reason(self, job: Job) -> str:
        latest = job.latest_outcomes[:1]  # type: ignore[attr-defined]  # set by market.selectors.jobs.job_detail
        # The newest outcome's sentence, from those to_representation explained for the outcomes' `text`.
        return str(self.context["outcome_text"].get(latest[0].pk, "")) if latest else ""

    @extend_schema_field(PlacementSerializer)
    def get_placement(self, job: Job) -> dict[str, Any]:
        return PlacementSerializer(job_placement(job)).data

    def get_log_tail(self, job: Job) -> str:
        return job_log_tail(job.lease_rows)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)

    def to_representation(self, instance: Job) -> dict[str, Any]:
        # Each outcome's sentence, as the job page words it: computed once for all of them (their rounds'
        # prices and evidence in one read each), then read by OutcomeSerializer.get_text.
        explained = explain_outcomes(instance, instance.latest_outcomes, instance.history)  # type: ignore[attr-defined]  # set by job_detail's Prefetch(to_attr=...)
        self.context["outcome_text"] = {e.outcome.pk: e.sentence for e in explained}
        return super().to_representation(instance)
