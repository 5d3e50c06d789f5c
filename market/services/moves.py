"""Moved leases (the allocator's Result.moves, consolidation: docs/rounds.md §Moves).

A round may move a running lease to other GPUs to make room for a gang. The commit preempts the old lease with
its grace period (reason ``moved``, like any preemption) and, in the same transaction, gives the job a new lease
on the new GPUs: held and bound to those GPUs at once, so no other round can take them, but with no bind
command yet. The bind is written only when the old lease has ended (``bind_moved``, from lease_stopped): the job
is never running in two places, and the agent starts it on the new node from its checkpoint directory. Each
lease holds and is charged for what its own agent measured, so the job pays once per lease and never for the
overlap.

A move whose job was cancelled meanwhile, or whose new GPUs were bound or went down since the freeze, is not
placed again: the old lease is still preempted and its job goes back to the queue, as after any preemption.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings

from allocator import Result, hold_of
from inventory.models import Node
from market.gang import gang_payloads
from market.models import (
    Command,
    CommandKind,
    CommandState,
    EndReason,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
)
from market.models.rounds import SKIP_UNCONFINED
from market.selectors.policy import current_fence
from market.services.command_wake import commands_written
from market.services.commit_rows import JobRow, Slot, Winner
from market.services.gpu_standing import TAKEN, UNAVAILABLE, UNCONFINED, gpu_standing
from market.services.ledger import ledger_release
from market.services.sandbox_bind import sandbox_fields, sandbox_payload

# A gang table (slot_ptr, slot_node, slot_idx) as Slot tuples, names resolved (round_commit._gangs).
GangReader = Callable[[Any, Any, Any], list[tuple[Slot, ...]]]

SKIP_MOVE_CANCELLED = "job_cancelled_during_round"
SKIP_MOVE_GPUS_TAKEN = "gpus_taken_during_round"
SKIP_MOVE_UNAVAILABLE = "gpus_unavailable_during_round"
# As round_commit.BIND_TTL: a bind an agent has not picked up by then is treated as lost.
BIND_TTL = timedelta(minutes=30)


class Moving(NamedTuple):
    """A moved job's new placement, as a winner of the round, and the lease it replaces."""

    winner: Winner
    old_lease: int


def moved_winners(result: Result, victims: list[Lease], gangs: GangReader) -> list[Moving]:
    """Each move whose old lease the commit preempted now (live and locked: `victims`), as a winner on its
    new GPUs with the old lease's type, tier and price; its hold covers the old lease's hold duration again."""
    moves = result.moves
    if not len(moves):
        return []
    live = {lease.pk: lease for lease in victims}
    out = []
    for lease_id, gang in zip(
        moves.lease.tolist(), gangs(moves.slot_ptr, moves.slot_node, moves.slot_idx), strict=True
    ):
        old = live.get(lease_id)
        if old is None:  # ended since the freeze: nothing left to move
            continue
        seconds = old.hold_seconds or old.max_seconds
        hold = int(hold_of(len(gang), old.price, seconds))
        winner = Winner(old.job_id, old.tenant_id, old.gpu_type_id, old.tier, old.price, hold, seconds, gang)
        out.append(Moving(winner, lease_id))
    return out


def admit_moves(moving: list[Moving], jobs: dict[int, JobRow]) -> tuple[list[Moving], dict[int, str]]:
    """The moves that can be placed again, and why the others cannot ({job id: reason})."""
    if not moving:
        return [], {}
    standing = gpu_standing(m.winner for m in moving)
    reasons = {TAKEN: SKIP_MOVE_GPUS_TAKEN, UNAVAILABLE: SKIP_MOVE_UNAVAILABLE, UNCONFINED: SKIP_UNCONFINED}
    ok: list[Moving] = []
    skipped: dict[int, str] = {}
    for m in moving:
        job = jobs.get(m.winner.job_id)
        problem = standing.problem(m.winner)
        if job is None or job.state == JobState.CANCELLED:
            skipped[m.winner.job_id] = SKIP_MOVE_CANCELLED
        elif problem is not None:
            skipped[m.winner.job_id] = reasons[problem]
        else:
            ok.append(m)
    return ok, skipped


def moved_successor(lease: Lease) -> Lease | None:
    """The lease a round moved `lease`'s job to, still waiting for its bind; locked. Taken before the job's
    lock, as every path takes leases before jobs (docs/rounds.md §Lock order)."""
    return (
        Lease.objects.select_for_update(no_key=True)
        .filter(moved_from_id=lease.pk, state=LeaseState.ALLOCATED)
        .order_by("pk")
        .first()
    )


def bind_moved(*, successor: Lease, job: Job, now: datetime) -> None:
    """The old lease has ended: bind its successor (one command per node of its gang, fenced now) and the job
    is allocated again. A job whose cancel was requested meanwhile is not started: the successor ends
    cancelled, its GPUs and its whole hold released (it never ran, so it is charged nothing)."""
    if job.cancel_requested_at is not None or job.state == JobState.CANCELLED:
        LeaseGpu.objects.filter(lease=successor, active=True).update(active=False)
        # Under the key lease_stopped would settle it with: one close of the hold, whichever comes first.
        ledger_release(
            hold_key=successor.hold_key,
            key=f"lease:{successor.pk}:settle",
            share=successor.hold_share,
            lease_id=successor.pk,
        )
        successor.state, successor.ended_at, successor.end_reason = LeaseState.ENDED, now, EndReason.CANCELLED
        successor.charged = 0
        successor.save(update_fields=["state", "ended_at", "end_reason", "charged"])
        job.state, job.ended_at = JobState.CANCELLED, now
        job.save(update_fields=["state", "ended_at", "updated_at"])
        return
    by_node: dict[int, list[str]] = defaultdict(list)
    for node_id, uuid in (
        LeaseGpu.objects.filter(lease=successor, active=True)
        .order_by("gpu__node_id", "gpu__index")
        .values_list("gpu__node_id", "gpu__uuid")
    ):
        by_node[node_id].append(uuid)
    fence = current_fence()
    gang = sum(len(uuids) for uuids in by_node.values())
    # As the round's binds: the sandbox's fields (tenant, limits) and the gang's wiring on its new nodes.
    confine = sandbox_fields([job.pk])[job.pk]
    addresses = {
        pk: (address, name)
        for pk, address, name in Node.objects.filter(pk__in=sorted(by_node)).values_list(
            "pk", "address", "name"
        )
    }
    wiring = gang_payloads(
        lease_id=successor.pk, gpus_by_node=by_node, addresses=addresses, port_range=settings.GANG_PORT_RANGE
    )
    Command.objects.bulk_create(
        Command(
            node_id=node_id,
            lease_id=successor.pk,
            kind=CommandKind.BIND,
            payload={
                "lease": successor.pk,
                "job": job.pk,
                "name": job.name,
                "command": job.command,
                "gpus": uuids,
                "gang_gpus": gang,
                "max_seconds": job.max_seconds,
                "grace_seconds": job.grace_seconds,
                "price": successor.price,
                **sandbox_payload(confine, len(uuids)),
                "gang": wiring[node_id],
            },
            fence=fence,
            state=CommandState.PENDING,
            created_at=now,
            expires_at=now + BIND_TTL,
        )
        for node_id, uuids in sorted(by_node.items())
    )
    commands_written(node_ids=sorted(by_node))
    successor.preemptible = successor.tier != "G"  # bound now: as any lease of its tier
    successor.save(update_fields=["preemptible"])
    job.state = JobState.ALLOCATED
    job.save(update_fields=["state", "updated_at"])
