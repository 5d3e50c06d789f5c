"""Reservations, backfill, moves and fragmentation as people see them (docs/portal.md, docs/rounds.md
§Reservations and backfill, §Moves).

The round commit keeps each round's reservations (market.Reservation), the free GPUs and whole free nodes per
type (RoundPrice.free_gpus/free_nodes), which leases were started by backfill (Lease.backfill) and which were
moved (preempt reason ``moved``, the new lease's ``moved_from``). The reservations *now* are the newest
committed round's: a reservation lasts one round and the next round decides afresh.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Subquery, Sum

from inventory.models import Node
from market.models import (
    LIVE_LEASE_STATES,
    BidOutcome,
    Job,
    JobState,
    Lease,
    PreemptReason,
    Reservation,
    Round,
    RoundPrice,
    RoundState,
)
from market.selectors.policy import market_policy


def latest_committed_round() -> Round | None:
    """The newest round whose result is written (its reservations are the ones that hold now)."""
    return (
        Round.objects.filter(committed_at__isnull=False)
        .exclude(state=RoundState.FAILED)
        .order_by("-pk")
        .first()
    )


@dataclass(frozen=True)
class Placement:
    """What a job's page and API say about its placement: ``kind`` is ``reserved`` (a waiting gang with nodes
    held for it), ``waiting_nodes`` (a gang no node fits, nothing reserved for it), ``backfilled``, ``moved`` or
    ``""`` (nothing to say); ``text`` the sentence."""

    kind: str
    text: str
    reserved_nodes: tuple[str, ...] = ()
    expected_start: datetime | None = None


def _at(when: datetime | None) -> str:
    return "unknown" if when is None else when.strftime("%Y-%m-%d %H:%M UTC")


def job_placement(job: Job) -> Placement:
    """The sentence for a job's placement (its own team's view: other teams' jobs are never named)."""
    if job.state == JobState.PENDING:
        return _waiting(job)
    rows = getattr(job, "lease_rows", None)  # job_detail's prefetch, when the job came from there
    live = [
        lease
        for lease in (rows if rows is not None else job.leases.select_related("node"))
        if lease.state in LIVE_LEASE_STATES
    ]
    moved = next((lease for lease in live if lease.moved_from_id is not None), None)
    if moved is not None:
        return Placement(
            "moved",
            f"Moved in round {moved.round_id} to {moved.node.name if moved.node_id else 'other GPUs'} to make "
            f"room for a gang (lease {moved.moved_from_id} was preempted with its grace period); it "
            + (
                "runs there now, restarted from its checkpoint directory."
                if job.state == JobState.RUNNING
                else "starts there from its checkpoint directory once the old lease has stopped."
            ),
        )
    backfill = next((lease for lease in live if lease.backfill), None)
    if backfill is not None:
        return Placement(
            "backfilled",
            f"Started by backfill in round {backfill.round_id} on a node held for a waiting gang, because it "
            "was predicted to end before the gang is due. If it runs past its predicted end, it is the first "
            "job preempted when the gang starts.",
        )
    return Placement("", "")


def _latest_round_id() -> Subquery:
    return Subquery(
        Round.objects.filter(committed_at__isnull=False)
        .exclude(state=RoundState.FAILED)
        .order_by("-pk")
        .values("pk")[:1]
    )


def _waiting(job: Job) -> Placement:
    """One query for the reservations (of the newest committed round); the newest outcome from job_detail's
    prefetch when there (``latest_outcomes``), else one more."""
    held = list(
        Reservation.objects.filter(round_id=_latest_round_id(), job=job)
        .select_related("node")
        .order_by("node__name")
    )
    if held:
        names = tuple(r.node.name for r in held)
        start = max((r.expected_start for r in held if r.expected_start), default=None)
        whole = "whole node" if len(held) == 1 else "whole nodes"
        return Placement(
            "reserved",
            f"Waiting for {len(held)} {whole}; reserved {', '.join(names)}, expected start {_at(start)} "
            "(predicted from the running jobs' expected ends). Until then only jobs predicted to end "
            "before it may run there (backfill).",
            names,
            start,
        )
    outcomes = getattr(job, "latest_outcomes", None)
    outcome = (
        (outcomes[0] if outcomes else None)
        if outcomes is not None
        else BidOutcome.objects.filter(job=job).order_by("-round_id").first()
    )
    if outcome is None or outcome.reason != "no_node_fits":
        return Placement("", "")  # the round's own explanation says why it lost
    capacity = (
        Node.objects.filter(gpu_type_id=outcome.gpu_type_id, state=Node.State.UP)
        .annotate(n=Count("gpus"))
        .order_by("-n")
        .values_list("n", flat=True)
        .first()
    ) or 1
    nodes = math.ceil(job.gpus / capacity)
    policy = market_policy()
    whole = "whole node" if nodes == 1 else "whole nodes"
    return Placement(
        "waiting_nodes",
        f"Waiting for {nodes} {whole}: the GPUs free now are spread over nodes, so no {job.gpus}-GPU gang "
        "fits. Nothing is reserved for it yet: nodes are reserved for the gang of the team owed the most "
        f"(at most {policy.max_reservations} gang(s) per GPU type and {policy.max_reserved_pct}% of a type's "
        "nodes at once), and a gang that has waited long enough to starve.",
    )


@dataclass(frozen=True)
class ReservationRow:
    node: str
    gpu_type: str
    job: int
    tenant: str
    expected_start: datetime | None
    backfill: tuple[tuple[int, str], ...]  # (lease id, tenant slug) of the backfill running there


def reservations_now() -> list[ReservationRow]:
    """The newest committed round's reservations, each with the backfilled leases live on its node."""
    rnd = latest_committed_round()
    if rnd is None:
        return []
    rows = list(
        Reservation.objects.filter(round=rnd)
        .select_related("node", "gpu_type", "job__tenant")
        .order_by("node__name")
    )
    backfill: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for lease_id, node_id, slug in (
        Lease.objects.filter(
            backfill=True, state__in=LIVE_LEASE_STATES, node_id__in=[r.node_id for r in rows]
        )
        .order_by("pk")
        .values_list("pk", "node_id", "tenant__slug")
    ):
        backfill[node_id].append((lease_id, slug))
    return [
        ReservationRow(
            r.node.name,
            r.gpu_type.name,
            r.job_id,
            r.job.tenant.slug,
            r.expected_start,
            tuple(backfill[r.node_id]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class FreeSeries:
    """Per GPU type over the window's rounds: GPUs free by count, and nodes wholly free."""

    gpu_type: str
    at: list[datetime]
    free_gpus: list[int]
    free_nodes: list[int]


def fragmentation(*, since: datetime) -> list[FreeSeries]:
    rows = (
        RoundPrice.objects.filter(round__committed_at__gte=since, free_gpus__isnull=False)
        .order_by("gpu_type__name", "round_id")
        .values_list("gpu_type__name", "round__committed_at", "free_gpus", "free_nodes")
    )
    series: dict[str, FreeSeries] = {}
    for name, at, gpus, nodes in rows:
        if at is None or gpus is None:  # filtered out above; typed nullable
            continue
        s = series.setdefault(name, FreeSeries(name, [], [], []))
        s.at.append(at)
        s.free_gpus.append(gpus)
        s.free_nodes.append(nodes or 0)
    return list(series.values())


@dataclass(frozen=True)
class MovesRound:
    round: int
    at: datetime | None
    moves: int
    lost_gpu_hours: float


def moves_per_round(*, since: datetime) -> list[MovesRound]:
    """Rounds in the window that moved leases: how many, and the work the moves threw away (GPU-hours since
    each moved job's last checkpoint, as the commit recorded it)."""
    rows = (
        Lease.objects.filter(preempt_reason=PreemptReason.MOVED, preempted_round__committed_at__gte=since)
        .values("preempted_round_id", "preempted_round__committed_at")
        .annotate(n=Count("pk"), lost=Sum("lost_gpu_s"))
        .order_by("-preempted_round_id")
    )
    return [
        MovesRound(
            r["preempted_round_id"], r["preempted_round__committed_at"], r["n"], (r["lost"] or 0) / 3600
        )
        for r in rows
    ]
