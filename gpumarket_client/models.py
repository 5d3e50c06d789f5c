"""The API's shapes as dataclasses. Field names are the API's own (they are the `--json` field names too);
each class names the OpenAPI component it reads (`COMPONENT`), and tests/cli/test_client_schema.py fails
when a field is missing from it, or, for classes marked COMPLETE, when the component has a required field the
class lacks. Amounts are integer micro-credits with a `*_credits` decimal string alongside, as in the API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from gpumarket_client.client import Client

TERMINAL_STATES = ("completed", "failed", "cancelled", "expired")
# Not an API field: excluded from the schema comparison and from --json.
LOCAL = {"api": False}

T = TypeVar("T", bound="ApiObject")


class ApiObject:
    COMPONENT: ClassVar[str]
    COMPLETE: ClassVar[bool] = False
    # Other components whose own fields this class also reads (the list's and the detail's extras).
    ALSO: ClassVar[tuple[str, ...]] = ()
    NESTED: ClassVar[dict[str, type[ApiObject]]] = {}

    @classmethod
    def from_api(cls: type[T], data: dict[str, Any]) -> T:
        kwargs: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]  # every subclass is a dataclass
            if f.metadata.get("api") is False or f.name not in data:
                continue
            value = data[f.name]
            nested = cls.NESTED.get(f.name)
            if nested is not None and isinstance(value, list):
                value = [nested.from_api(v) for v in value]
            elif nested is not None and isinstance(value, dict):
                value = nested.from_api(value)
            kwargs[f.name] = value
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            if f.metadata.get("api") is False:
                continue
            out[f.name] = _plain(getattr(self, f.name))
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, ApiObject):
        return value.to_json()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class TenantRole(ApiObject):
    COMPONENT = "TenantRole"
    COMPLETE = True
    slug: str
    name: str
    role: str


@dataclass
class Me(ApiObject):
    COMPONENT = "Me"
    COMPLETE = True
    NESTED = {"tenants": TenantRole}
    username: str
    email: str
    is_admin: bool
    token_tenant: str | None
    tenants: list[TenantRole]


@dataclass
class BidEntry(ApiObject):
    COMPONENT = "Limit"
    COMPLETE = True
    gpu_type: str
    limit: int
    limit_credits: str


@dataclass
class QueuePlace(ApiObject):
    COMPONENT = "QueuePlace"
    COMPLETE = True
    gpu_type: str
    limit: int
    position: int
    gpus_ahead: int


@dataclass
class StartEstimate(ApiObject):
    COMPONENT = "StartEstimate"
    COMPLETE = True
    gpu_type: str
    at: str | None
    text: str


@dataclass
class Guidance(ApiObject):
    COMPONENT = "Guidance"
    COMPLETE = True
    gpu_type: str
    reserve: int
    posted: int
    unused_guarantee: int
    recent_spot: list[int]
    limit: int | None
    tier: str | None
    advice: str


@dataclass
class Estimate(ApiObject):
    """What a job will likely take and cost and when it may start (client.estimate, a job's detail)."""

    COMPONENT = "DraftEstimate"
    ALSO = ("Estimate",)
    NESTED = {"starts": StartEstimate, "guidance": Guidance}
    prediction_text: str
    price: int | None
    cost: int | None
    cost_p90: int | None
    cost_text: str
    starts: list[StartEstimate]
    guidance: list[Guidance] = field(default_factory=list)
    warning: str = ""


@dataclass
class Lease(ApiObject):
    COMPONENT = "Lease"
    id: int
    round: int
    node: str | None
    gpu_type: str
    gpus: int
    tier: str
    price: int
    price_credits: str
    state: str
    started_at: str | None
    running_at: str | None
    ended_at: str | None
    end_reason: str
    charged: int | None
    charged_credits: str | None
    exit_code: int | None


@dataclass
class Job(ApiObject):
    """A job: what the list, the submit and the detail answer. The detail's own fields (leases, queue,
    log_tail, estimate) are empty until `refresh()` reads it."""

    COMPONENT = "Job"
    COMPLETE = True
    ALSO = ("JobListItem", "JobDetail")
    NESTED = {"bids": BidEntry, "leases": Lease, "queue": QueuePlace, "estimate": Estimate}
    id: int
    tenant: str
    submitter: str
    name: str
    command: str
    gpus: int
    max_hours: str
    max_seconds: int
    grace_seconds: int | None
    state: str
    bid_version: int
    bids: list[BidEntry]
    warnings: list[str]
    submitted_at: str
    rounds_waited: int
    cancel_requested_at: str | None
    ended_at: str | None
    updated_at: str
    cpus_per_gpu: str | None
    memory_gb_per_gpu: str | None
    # The list's (JobListItem) and the detail's (JobDetail) own fields.
    tier: str | None = None
    node: str | None = None
    reason: str = ""
    leases: list[Lease] = field(default_factory=list)
    queue: list[QueuePlace] = field(default_factory=list)
    log_tail: str = ""
    estimate: Estimate | None = None
    client: Client | None = field(default=None, repr=False, compare=False, metadata=LOCAL)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def exit_code(self) -> int | None:
        """The exit code its newest lease's agents reported; None while it runs or when it never exited."""
        for lease in reversed(self.leases):
            if lease.exit_code is not None:
                return lease.exit_code
        return None

    @property
    def charged(self) -> int:
        return sum(lease.charged or 0 for lease in self.leases)

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError("this Job was not read through a Client")
        return self.client

    def refresh(self) -> Job:
        """Read the job again (its detail: leases, queue, log tail, estimate) and return it."""
        fresh = self._client().jobs.get(self.id)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))
        return self

    def cancel(self, *, idempotency_key: str | None = None) -> Job:
        return self._client().jobs.cancel(self.id, idempotency_key=idempotency_key)

    def logs(self) -> str:
        """The last 64 KiB of its output, from its newest lease that reported any."""
        return self.refresh().log_tail

    def follow(self, *, interval: float = 2.0) -> Iterator[str]:
        """Its output as it grows, until the job ends (the API keeps the last 64 KiB: a job that writes
        faster than `interval` allows loses lines in between)."""
        seen = ""
        while True:
            tail = self.refresh().log_tail
            yield new_output(seen, tail)
            seen = tail
            if self.done:
                return
            time.sleep(interval)

    def wait(
        self,
        *,
        interval: float = 2.0,
        timeout: float | None = None,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        """Poll until the job ends; `on_update` sees it after every read. Raises TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.refresh()
            if on_update is not None:
                on_update(self)
            if self.done:
                return self
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} still {self.state} after {timeout:g} s")
            time.sleep(interval)


def new_output(seen: str, tail: str) -> str:
    """What `tail` adds to `seen`; both are the end of the same growing output, so the new part starts
    where the longest end of `seen` that begins `tail` stops."""
    if not seen:
        return tail
    if tail.startswith(seen):
        return tail[len(seen) :]
    for cut in range(len(seen)):
        if tail.startswith(seen[cut:]):
            return tail[len(seen) - cut :]
    return tail


@dataclass
class Price(ApiObject):
    COMPONENT = "PriceBoard"
    COMPLETE = True
    gpu_type: str
    reserve: int
    reserve_credits: str
    posted: int
    posted_credits: str
    max: int
    max_credits: str
    spot: int | None
    spot_credits: str | None
    last_round: int | None
    last_round_at: str | None


@dataclass
class Balance(ApiObject):
    COMPONENT = "Balance"
    COMPLETE = True
    available: int
    held: int
    spent: int
    available_credits: str
    held_credits: str
    spent_credits: str


@dataclass
class SpendDay(ApiObject):
    COMPONENT = "SpendDay"
    COMPLETE = True
    day: str
    gpu_type: str
    charged: int
    charged_credits: str


@dataclass
class Spend(ApiObject):
    COMPONENT = "Spend"
    COMPLETE = True
    NESTED = {"days": SpendDay}
    since: str
    days: list[SpendDay]
    total: int
    total_credits: str


@dataclass
class SpendAlert(ApiObject):
    COMPONENT = "Rule"
    id: int
    kind: str
    threshold: str
    unit: str
    description: str
    action: str
    cap: str | None
    active: bool
    blocked: bool
    blocked_since: str | None


@dataclass
class Node(ApiObject):
    COMPONENT = "Node"
    id: int
    name: str
    gpu_type: str
    topology_domain: str
    state: str
    agent_version: str
    last_heartbeat: str | None
    drained_at: str | None
    gpus: list[dict[str, Any]]


@dataclass
class Change(ApiObject):
    COMPONENT = "Change"
    COMPLETE = True
    path: str
    old: Any
    new: Any


@dataclass
class PolicyVersion(ApiObject):
    """A policy version; `diff` and `current` only from a version's detail (policy diff)."""

    COMPONENT = "Version"
    COMPLETE = True
    ALSO = ("VersionDetail",)
    NESTED = {"diff": Change}
    number: int
    kind: str
    status: str
    created_at: str
    actor: str | None
    reason: str
    parent: int | None
    detail: Any
    current: int | None = None
    diff: list[Change] = field(default_factory=list)


@dataclass
class RevertResult(ApiObject):
    COMPONENT = "RevertResult"
    COMPLETE = True
    NESTED = {"version": PolicyVersion}
    version: PolicyVersion | None
    changed: bool
    replayed: bool
    skipped_tenants: list[str]
    skipped_types: list[str]
