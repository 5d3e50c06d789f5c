"""Shapes of the agent API and the admins' node API (docs/agent.md)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.api import BodySerializer, QuerySerializer
from config.fields import TextField
from inventory.addresses import ADDRESS_MAX, check_node_address
from inventory.models import Gpu, GpuType, Node
from nodeagent.models import BootstrapToken
from nodeagent.services.registration import GpuInfo
from nodeagent.services.usage_parse import LOG_TAIL_MAX, MAX_GPUS, MAX_LEASES

# Agent requests

LONG_POLL_V1_S = 25  # what a protocol 1 agent waits at most, whatever the server says
MAX_ACKS = 1_000  # acknowledgements in one report: far above what one poll brings (100 commands)
MAX_EVENTS = 100  # what the agent keeps at most (sandbox_gpus.MAX_EVENTS)


class NodeAddressField(serializers.CharField):
    """A node's address (inventory.addresses): an IP or a host name, in its one spelling; blank clears it."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(max_length=ADDRESS_MAX, allow_blank=True, trim_whitespace=True, **kwargs)  # type: ignore[arg-type]

    def to_internal_value(self, data: str) -> str:
        text = super().to_internal_value(data)
        try:
            return check_node_address(text)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class GpuInfoSerializer(serializers.Serializer[object]):
    uuid = serializers.CharField(max_length=96)
    index = serializers.IntegerField(min_value=0, max_value=255)
    model = serializers.CharField(max_length=128, allow_blank=True)
    memory_mb = serializers.IntegerField(min_value=0, max_value=10**8)


class RegisterSerializer(serializers.Serializer[object]):
    name = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=128,
        required=False,
        allow_blank=True,
        help_text="The node's name (letters, digits, . _ -); a bootstrap token that names one overrides it.",
    )
    agent_version = serializers.CharField(max_length=64, allow_blank=True, default="")
    address = NodeAddressField(
        required=False,
        help_text="Where the other nodes of a gang reach this one: an IP address or a host name. "
        "Left out: the node keeps the one it has; an admin's pinned address always stands.",
    )
    gpus = GpuInfoSerializer(many=True, help_text="Every GPU NVML reports on the machine.")
    capabilities = serializers.JSONField(
        required=False,
        default=None,
        help_text="What the agent enforces on a job: sandbox, cgroup limits, tenant users, log cap "
        "(docs/agent.md §The sandbox). Absent from agents before it: nothing enforced.",
    )

    def validate_capabilities(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict) or len(json.dumps(value)) > 4096:
            raise serializers.ValidationError("must be an object of at most 4096 characters as JSON")
        return value

    def gpu_infos(self) -> list[GpuInfo]:
        return [GpuInfo(**g) for g in self.validated_data["gpus"]]


class GpuHealthSerializer(serializers.Serializer[object]):
    uuid = serializers.CharField(max_length=96)
    healthy = serializers.BooleanField()
    error = serializers.CharField(max_length=500, allow_blank=True, default="")


class GuardEventSerializer(serializers.Serializer[object]):
    kind = serializers.ChoiceField(choices=["gpu_drained", "gpu_resumed", "foreign_killed"])
    gpu = serializers.CharField(max_length=96)
    pid = serializers.IntegerField(min_value=0, allow_null=True, required=False, default=None)
    detail = serializers.CharField(max_length=500, allow_blank=True, default="")
    at = serializers.FloatField(min_value=0, required=False, help_text="The agent's clock, epoch seconds.")


class HeartbeatSerializer(serializers.Serializer[object]):
    boot_epoch = serializers.IntegerField(min_value=0, max_value=2**31 - 1)

    def validate_events(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(value) > 100:  # what the agent keeps at most (sandbox_gpus.MAX_EVENTS)
            raise serializers.ValidationError("at most 100 events")
        return value

    events = GuardEventSerializer(
        many=True,
        required=False,
        default=list,
        help_text="What the agent did between tenants since the last heartbeat: a GPU drained or resumed, a "
        "process on a GPU no lease holds killed (audited).",
    )
    gpus = GpuHealthSerializer(many=True, required=False, default=list)
    leases = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        max_length=MAX_LEASES,
        required=False,
        default=list,
        help_text="Leases whose jobs the agent has running.",
    )


class CommandsQuerySerializer(serializers.Serializer[object]):
    after = serializers.IntegerField(min_value=0, default=0, help_text="The last command id already seen.")
    wait = serializers.IntegerField(
        min_value=0,
        default=0,
        help_text="Seconds to hold the request until a command exists: at most the poll_seconds the server "
        "sends (AGENT_POLL_SECONDS, 240), and never less than 25.",
    )

    def validate_wait(self, value: int) -> int:
        most = max(LONG_POLL_V1_S, settings.AGENT_POLL_SECONDS)
        if value > most:
            raise serializers.ValidationError(f"at most {most}")
        return value


class AckSerializer(serializers.Serializer[object]):
    result = serializers.ChoiceField(choices=["applied", "refused"])
    detail = serializers.CharField(max_length=500, allow_blank=True, default="")


class StartedSerializer(serializers.Serializer[object]):
    at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class CountersSerializer(serializers.Serializer[object]):
    """Cumulative from the job's start on this node."""

    gpu_seconds = serializers.FloatField(min_value=0, help_text="GPUs held x seconds since the job started.")
    energy_j = serializers.FloatField(min_value=0)
    util_avg = serializers.FloatField(min_value=0, max_value=100)
    util_max = serializers.FloatField(min_value=0, max_value=100)
    mem_avg_mb = serializers.FloatField(min_value=0)
    mem_max_mb = serializers.FloatField(min_value=0)
    samples = serializers.IntegerField(min_value=0)
    log_tail = serializers.CharField(
        required=False, allow_blank=True, help_text=f"The job's last {LOG_TAIL_MAX} characters of output."
    )
    checkpoint_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When the job last saved its work in this lease (a marker line in its log or a file written "
        "in its checkpoint directory); absent or null when it has not. Kept on the lease only when it moves "
        "the lease's checkpoint forward and is not ahead of the server's clock (docs/agent.md §Checkpoints).",
    )


class LeaseCountersSerializer(CountersSerializer):
    lease = serializers.IntegerField(min_value=1)


@extend_schema_field(CountersSerializer(allow_null=True))
class CountersJSONField(serializers.JSONField):
    """The final counters, documented as CountersSerializer and checked by usage_parse.parse_counters (the same
    rules as in a usage report)."""


class ExitedSerializer(serializers.Serializer[object]):
    at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    exit_code = serializers.IntegerField(allow_null=True, min_value=-(2**31), max_value=2**31 - 1)
    signal = serializers.IntegerField(
        allow_null=True, required=False, default=None, min_value=0, max_value=128
    )
    stopped_by = serializers.ChoiceField(
        choices=["preempt", "release", "expiry"], allow_null=True, required=False, default=None
    )
    usage = CountersJSONField(required=False, allow_null=True, default=None, help_text="The final counters.")
    reason = serializers.ChoiceField(
        choices=["out of memory"],
        allow_null=True,
        required=False,
        default=None,
        help_text="Why it ended beyond its code: the kernel killed it over its memory limit.",
    )


class ProcessSerializer(serializers.Serializer[object]):
    pid = serializers.IntegerField(min_value=0)
    used_mb = serializers.FloatField(min_value=0)
    lease = serializers.IntegerField(allow_null=True, help_text="null: no lease of this node covers the GPU.")


class GpuSampleSerializer(serializers.Serializer[object]):
    uuid = serializers.CharField(max_length=96)
    at = serializers.DateTimeField()
    healthy = serializers.BooleanField()
    util_pct = serializers.FloatField(min_value=0, max_value=100)
    mem_used_mb = serializers.FloatField(min_value=0)
    power_w = serializers.FloatField(min_value=0)
    energy_j = serializers.FloatField(min_value=0, help_text="The GPU's total energy counter.")
    processes = ProcessSerializer(many=True)


class UsageReportSerializer(serializers.Serializer[object]):
    """Documents the report for the schema; nodeagent.services.usage_parse checks it (field by field, fast)."""

    boot_epoch = serializers.IntegerField(min_value=0)
    seq = serializers.IntegerField(min_value=1, help_text="From 1 in each boot epoch, one more per report.")
    sent_at = serializers.DateTimeField()
    gpus = GpuSampleSerializer(many=True, help_text=f"At most {MAX_GPUS}.")
    leases = LeaseCountersSerializer(many=True, help_text=f"At most {MAX_LEASES}.")


class _ReportGpuSerializer(BodySerializer, GpuHealthSerializer):
    pass


class _ReportEventSerializer(BodySerializer, GuardEventSerializer):
    pass


class ReportAckSerializer(BodySerializer):
    command = serializers.IntegerField(min_value=1)
    result = serializers.ChoiceField(choices=["applied", "refused"])
    detail = serializers.CharField(max_length=500, allow_blank=True, default="")


class ReportStartedSerializer(BodySerializer):
    lease = serializers.IntegerField(min_value=1)
    at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ReportExitedSerializer(BodySerializer, ExitedSerializer):
    lease = serializers.IntegerField(min_value=1)


class ReportSerializer(BodySerializer):
    """A protocol 2 report (docs/agent.md §Protocol 2). Unknown fields are refused, naming them; every list is
    bounded. `usage` and `leases` are checked by nodeagent.services.usage_parse (fast, field by field)."""

    unknown_message = "is not a field of a protocol 2 report"

    protocol = serializers.IntegerField(min_value=2, max_value=2)
    boot_epoch = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    seq = serializers.IntegerField(
        min_value=1, max_value=2**62, help_text="From 1 in each boot epoch, +1 a report."
    )
    sent_at = serializers.DateTimeField()
    gpus: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=_ReportGpuSerializer(), required=False, default=list, max_length=MAX_GPUS
    )
    running = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        max_length=MAX_LEASES,
        required=False,
        default=list,
        help_text="Leases whose jobs the agent has running.",
    )
    events: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=_ReportEventSerializer(), required=False, default=list, max_length=MAX_EVENTS
    )
    acks: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=ReportAckSerializer(), required=False, default=list, max_length=MAX_ACKS
    )
    started: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=ReportStartedSerializer(), required=False, default=list, max_length=MAX_LEASES
    )
    exited: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=ReportExitedSerializer(), required=False, default=list, max_length=MAX_LEASES
    )
    usage = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The samples since the last report, as columns.",
    )
    leases = serializers.JSONField(
        required=False, default=None, help_text=f"Cumulative counters per lease (at most {MAX_LEASES})."
    )


class _ReportHeadSerializer(BodySerializer):
    """The report's scalar fields, checked by DRF; its lists are checked apart (check_report)."""

    refuse_unknown = False
    protocol = ReportSerializer._declared_fields["protocol"]
    boot_epoch = ReportSerializer._declared_fields["boot_epoch"]
    seq = ReportSerializer._declared_fields["seq"]
    sent_at = ReportSerializer._declared_fields["sent_at"]
    running = ReportSerializer._declared_fields["running"]
    usage = ReportSerializer._declared_fields["usage"]
    leases = ReportSerializer._declared_fields["leases"]


_REPORT_LISTS: tuple[tuple[str, type[BodySerializer], int], ...] = (
    ("events", _ReportEventSerializer, MAX_EVENTS),
    ("acks", ReportAckSerializer, MAX_ACKS),
    ("started", ReportStartedSerializer, MAX_LEASES),
    ("exited", ReportExitedSerializer, MAX_LEASES),
)
_GPU_KEYS = frozenset({"uuid", "healthy", "error"})


def check_report(data: Any) -> dict[str, Any]:
    """ReportSerializer's validated data, at a fraction of its cost for the usual report: the lists that
    are empty (events, acks, starts and exits mostly are) never reach a nested serializer, and GPU health
    in its usual shape is checked by hand; anything unusual goes through DRF for its field-by-field errors.
    The same rules and the same 400s as ReportSerializer (tests/nodeagent/test_report.py)."""
    if not isinstance(data, dict):
        raise serializers.ValidationError({"body": ["must be a JSON object"]})
    unknown = sorted(set(data) - set(ReportSerializer._declared_fields))
    if unknown:
        raise serializers.ValidationError({k: [ReportSerializer.unknown_message] for k in unknown})
    head = _ReportHeadSerializer(
        data={k: v for k, v in data.items() if k in _ReportHeadSerializer._declared_fields}
    )
    head.is_valid(raise_exception=True)
    out = dict(head.validated_data)
    out["gpus"] = _gpus(data.get("gpus", []))
    for name, serializer, most in _REPORT_LISTS:
        items = data.get(name, [])
        if items == []:
            out[name] = []
            continue
        checked: serializers.ListSerializer[Any] = serializers.ListSerializer(
            data=items, child=serializer(), max_length=most
        )
        if not checked.is_valid():
            raise serializers.ValidationError({name: checked.errors})
        out[name] = checked.validated_data
    return out


def _gpus(items: Any) -> list[dict[str, Any]]:
    if type(items) is list and len(items) <= MAX_GPUS:
        usual = [
            g
            for g in items
            if type(g) is dict
            and g.keys() <= _GPU_KEYS
            and type(g.get("uuid")) is str
            and 0 < len(g["uuid"].strip()) <= 96
            and type(g.get("healthy")) is bool
            and type(g.get("error", "")) is str
            and len(g.get("error", "")) <= 500
        ]
        if len(usual) == len(items):
            return [
                {"uuid": g["uuid"].strip(), "healthy": g["healthy"], "error": g.get("error", "")}
                for g in items
            ]
    checked: serializers.ListSerializer[Any] = serializers.ListSerializer(
        data=items, child=_ReportGpuSerializer(), max_length=MAX_GPUS
    )
    if not checked.is_valid():
        raise serializers.ValidationError({"gpus": checked.errors})
    return list(checked.validated_data)


# Agent responses


class RegisteredSerializer(serializers.Serializer[object]):
    node = serializers.IntegerField()
    name = serializers.CharField()
    credential = serializers.CharField(required=False, help_text="gpn_…, only on the first registration.")
    heartbeat_seconds = serializers.IntegerField(help_text="Protocol 1 agents: how often to heartbeat.")
    poll_seconds = serializers.IntegerField(help_text="How long to hold a command poll, at most.")
    protocol = serializers.IntegerField(help_text="The newest protocol the server speaks (2).")
    report_seconds = serializers.FloatField(help_text="Protocol 2 agents: when to send the first report.")


class HeartbeatReplySerializer(serializers.Serializer[object]):
    state = serializers.ChoiceField(choices=Node.State.choices)
    fence = serializers.IntegerField(help_text="The newest round's id.")
    server_time = serializers.DateTimeField()


class ReportReplySerializer(HeartbeatReplySerializer):
    acked = serializers.IntegerField(help_text="The report's seq: it is stored.")
    report_seconds = serializers.FloatField(
        help_text="Seconds until the next report (fleet pacing, staggered)."
    )
    poll_seconds = serializers.IntegerField(help_text="How long to hold a command poll, at most.")
    ignored = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        required=False,
        help_text="Items about another node's commands or leases, left alone: {acks|started|exited: [id]}.",
    )
    refused = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField()),
        required=False,
        help_text="Items the server refused, with why: {acks|started|exited: {id: why}}.",
    )


class CommandSerializer(serializers.Serializer[object]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    lease = serializers.IntegerField(source="lease_id")
    fence = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    payload = serializers.JSONField()


class CommandsSerializer(serializers.Serializer[object]):
    commands = CommandSerializer(many=True)


class AckedSerializer(serializers.Serializer[object]):
    acked = serializers.IntegerField()


class LeaseReplySerializer(serializers.Serializer[object]):
    lease = serializers.IntegerField(source="pk")
    state = serializers.CharField()
    end_reason = serializers.CharField()
    charged = serializers.IntegerField(allow_null=True, help_text="Micro-credits, once settled.")


# Admin


class BootstrapCreateSerializer(BodySerializer):
    name = TextField(
        pattern="[A-Za-z0-9][A-Za-z0-9._-]*",
        pattern_message="must be a letter or digit, then letters, digits, dots, dashes or underscores",
        max_length=128,
        required=False,
        allow_blank=True,
        default="",
    )
    gpu_type: serializers.SlugRelatedField[GpuType] = serializers.SlugRelatedField(
        slug_field="name", queryset=GpuType.objects.all(), required=False, allow_null=True, default=None
    )
    topology_domain = TextField(max_length=64, required=False, allow_blank=True, default="")
    ttl_hours = serializers.IntegerField(min_value=1, max_value=720, default=24)


class BootstrapTokenSerializer(serializers.ModelSerializer[BootstrapToken]):
    gpu_type: serializers.SlugRelatedField[GpuType] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    token = serializers.SerializerMethodField(help_text="The secret, shown this once.")

    class Meta:
        model = BootstrapToken
        fields = ["id", "prefix", "token", "name", "gpu_type", "topology_domain", "created_at", "expires_at"]
        read_only_fields = fields

    def get_token(self, obj: BootstrapToken) -> str:
        return str(self.context["secret"])


class GpuSerializer(serializers.ModelSerializer[Gpu]):
    class Meta:
        model = Gpu
        fields = ["index", "uuid", "model", "memory_mb", "healthy", "error", "absent"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer[Node]):
    gpu_type: serializers.SlugRelatedField[GpuType] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    gpus = GpuSerializer(many=True, source="gpu_rows", read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "gpu_type",
            "topology_domain",
            "state",
            "agent_version",
            "address",
            "address_pinned",
            "boot_epoch",
            "last_heartbeat",
            "down_since",
            "drained_at",
            "retired_at",
            "created_at",
            "gpus",
        ]
        read_only_fields = fields


class NodeAddressSerializer(BodySerializer):
    """`PATCH nodes/<name>`: an admin sets (pins) the node's address, or clears it with "" (the agent's next
    registration then sets it again)."""

    refuse_unknown = True
    address = NodeAddressField(
        help_text='An IP address or a host name; "" gives the address back to the agent.'
    )


class NodeFilterSerializer(QuerySerializer):
    """`?state=` given empty is a 400 naming it, as for every list filter (config/api.QuerySerializer)."""

    state = serializers.ChoiceField(choices=Node.State.choices, required=False)
