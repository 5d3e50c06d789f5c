"""Each part of a lease as its owner sees it: node, rank, state, how it ended, its log (docs/jobs.md).

A part has a LeasePart row once its agent reported something (started, exited, refused) or its node was
lost; before that it is "starting" (its bind waits for the agent), and a part of an ended lease that never
reported is "not started". Reads what market.selectors.jobs.job_detail prefetched: no query of its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from market.gang import part_ranks
from market.models import Lease, LeasePart, LeaseState, PartState

STARTING, NOT_STARTED = "starting", "not started"


class PartView(NamedTuple):
    rank: int
    node: str
    state: str  # a PartState value, "starting" or "not started"
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    signal: int | None
    text: str  # one sentence: how it ended, or that it runs
    log_tail: str


def part_how(part: LeasePart) -> str:
    """How an ended part ended, after "part N on node X ": "exited with code 3", "could not start: ..."."""
    if part.state == PartState.REFUSED:
        return f"could not start: {part.detail}" if part.detail else "could not start"
    if part.state == PartState.LOST:
        return "was lost: its node went down"
    if part.signal is not None:
        return f"was killed by signal {part.signal}"
    if part.exit_code is None:
        return "ended with no exit status (its node lost track of it)"
    return f"exited with code {part.exit_code}"


def part_sentence(part: LeasePart, node_name: str) -> str:
    """'part 1 on node gpu-b exited with code 3', 'node gpu-b (part 1) down': the lease's end_detail."""
    if part.state == PartState.LOST:
        return f"node {node_name} (part {part.rank}) down"
    return f"part {part.rank} on node {node_name} {part_how(part)}"


def _text(rank: int, node: str, part: LeasePart | None, state: str) -> str:
    if part is None:
        return f"part {rank} on node {node}: " + (
            "never started" if state == NOT_STARTED else "waiting for its agent to start it"
        )
    if part.state == PartState.RUNNING:
        return f"part {rank} on node {node} is running"
    return part_sentence(part, node)


def lease_part_views(lease: Lease) -> list[PartView]:
    """The lease's parts in rank order. `lease` comes from job_detail, with `gpus_bound` (each GPU with its
    node), `part_rows` and `usage_rows` prefetched."""
    names = {g.gpu.node_id: g.gpu.node.name for g in lease.gpus_bound}  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    rows = {p.node_id: p for p in lease.part_rows}  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    tails = {u.node_id: u.log_tail for u in lease.usage_rows}  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    views = []
    for node_id, rank in part_ranks(names).items():
        part = rows.get(node_id)
        if part is not None:
            state = str(part.state)
        else:
            state = NOT_STARTED if lease.state == LeaseState.ENDED else STARTING
        views.append(
            PartView(
                rank=rank,
                node=names[node_id],
                state=state,
                started_at=part.started_at if part else None,
                ended_at=part.ended_at if part else None,
                exit_code=part.exit_code if part else None,
                signal=part.signal if part else None,
                text=_text(rank, names[node_id], part, state),
                log_tail=tails.get(node_id, ""),
            )
        )
    return views
