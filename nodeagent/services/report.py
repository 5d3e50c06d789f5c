"""An agent's protocol 2 report (docs/agent.md §Protocol 2): everything it has to say since its last, applied
in one transaction and in a fixed order.

1. the heartbeat: last_heartbeat and boot epoch, GPU health, a release for each job it runs whose lease was
   settled meanwhile, and its guard events (nodeagent.services.heartbeat);
2. acknowledgements (command_ack), then starts (lease_started): a bind is acknowledged before its job's
   start is counted, as a protocol 1 agent sends them;
3. the samples and the leases' cumulative counters (nodeagent.services.usage.report_ingest);
4. exits (lease_exited), after the counters, so that a job's final counters count in its settlement.

Every item is safe to repeat (a lost answer makes the agent send the same report again). An item about
another node's command or lease (or none at all) is ignored, and named in the answer's `ignored`; an item a
service refuses (NodeError) is refused alone, in a savepoint, and named in `refused`: the rest of the report
still counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from inventory.models import Node
from market.models import Command, Lease
from nodeagent.errors import NodeError
from nodeagent.services.heartbeat import GpuHealth, node_alive, node_guard_events
from nodeagent.services.lease_events import command_ack, lease_exited, lease_started
from nodeagent.services.usage import report_ingest
from nodeagent.services.usage_parse import LeaseCounters, Samples


@dataclass(frozen=True)
class Ack:
    command: int
    result: str
    detail: str = ""


@dataclass(frozen=True)
class Started:
    lease: int
    at: datetime | None = None


@dataclass(frozen=True)
class Exited:
    lease: int
    exit_code: int | None
    at: datetime | None = None
    signal: int | None = None
    stopped_by: str | None = None
    reason: str | None = None
    usage: LeaseCounters | None = None


@dataclass(frozen=True)
class AgentReport:
    boot_epoch: int
    seq: int
    sent_at: datetime
    gpus: list[GpuHealth] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    started: list[Started] = field(default_factory=list)
    exited: list[Exited] = field(default_factory=list)
    samples: Samples | None = None
    leases: list[LeaseCounters] = field(default_factory=list)


@dataclass
class ReportOutcome:
    node: Node
    new: bool  # the samples were stored now (False: a repeat of a report already stored)
    acked: list[Command] = field(default_factory=list)
    ignored: dict[str, list[int]] = field(default_factory=dict)  # not this node's: {"acks": [88], ...}
    refused: dict[str, dict[int, str]] = field(
        default_factory=dict
    )  # a service said no: {"exited": {41: why}}

    def ignore(self, part: str, item: int) -> None:
        self.ignored.setdefault(part, []).append(item)

    def refuse(self, part: str, item: int, exc: NodeError) -> None:
        self.refused.setdefault(part, {})[item] = exc.message


def _own_leases(node: Node, ids: set[int]) -> dict[int, Lease]:
    """The leases among `ids` with a GPU on this node (as nodeagent.selectors.nodes.node_lease, in one query)."""
    if not ids:
        return {}
    return {
        lease.pk: lease for lease in Lease.objects.filter(pk__in=ids, lease_gpus__gpu__node=node).distinct()
    }


@transaction.atomic
def report_apply(*, node: Node, report: AgentReport, now: datetime | None = None) -> ReportOutcome:
    now = now or timezone.now()
    node = node_alive(
        node=node, boot_epoch=report.boot_epoch, gpus=report.gpus, leases=report.running, now=now
    )
    node_guard_events(node=node, events=report.events)
    outcome = ReportOutcome(node=node, new=False)
    commands = (
        {c.pk: c for c in Command.objects.filter(node=node, pk__in={a.command for a in report.acks})}
        if report.acks
        else {}
    )
    for ack in report.acks:
        command = commands.get(ack.command)
        if command is None:
            outcome.ignore("acks", ack.command)
            continue
        try:
            with transaction.atomic():
                outcome.acked.append(
                    command_ack(command=command, result=ack.result, detail=ack.detail, now=now)
                )
        except NodeError as exc:
            outcome.refuse("acks", ack.command, exc)
    leases = _own_leases(node, {s.lease for s in report.started} | {e.lease for e in report.exited})
    for started in report.started:
        lease = leases.get(started.lease)
        if lease is None:
            outcome.ignore("started", started.lease)
            continue
        try:
            with transaction.atomic():
                lease_started(node=node, lease=lease, at=started.at, now=now)
        except NodeError as exc:
            outcome.refuse("started", started.lease, exc)
    outcome.new = report_ingest(
        node_id=node.pk,
        boot_epoch=report.boot_epoch,
        seq=report.seq,
        sent_at=report.sent_at,
        samples=report.samples,
        leases=report.leases,
        now=now,
    )
    for exited in report.exited:
        lease = leases.get(exited.lease)
        if lease is None:
            outcome.ignore("exited", exited.lease)
            continue
        try:
            with transaction.atomic():
                lease_exited(
                    node=node,
                    lease=lease,
                    exit_code=exited.exit_code,
                    signal=exited.signal,
                    stopped_by=exited.stopped_by,
                    usage=exited.usage,
                    reason=exited.reason,
                    now=now,
                )
        except NodeError as exc:
            outcome.refuse("exited", exited.lease, exc)
    return outcome
