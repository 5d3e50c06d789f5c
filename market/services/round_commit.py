"""Step 8 of the clearing: write one round's result in one transaction (ARCHITECTURE.md §Clearing, Commit).

The commit is a sequence of named steps over typed rows (`commit_result` reads as the list): resolve the
result's names to ids, lock, preempt, admit, hold, insert leases, their GPUs and their bind commands, mark the
jobs allocated, record outcomes and prices. Every write is a bulk statement (`market.bulk`: COPY and
`UPDATE ... FROM` arrays on PostgreSQL), a fixed number per round rather than a query per job. The result is
mapped back through names (type name, node name, tenant slug, GPU index), so a commit resumed from a stored
snapshot in another process writes exactly what the first attempt would have.

A winner is dropped (its outcome says why) when its job changed after the freeze (cancelled or bid amended),
when one of its GPUs was bound meanwhile, when its hold no longer fits the tenant's money, or when its hold's
key was already used for another hold (counted; the rest of the round goes on).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import F, OuterRef

from accounts.models import Tenant
from allocator import BUSY, PREEMPT_NAMES, REASON_NAMES, TIER_NAMES, Book, Preemptions, Result
from inventory.models import Gpu, GpuType, Node
from market import bulk
from market.gang import gang_payloads
from market.models import (
    LIVE_LEASE_STATES,
    BidOutcome,
    Command,
    CommandKind,
    CommandState,
    EndReason,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
    Round,
    RoundLoss,
    RoundPrice,
)
from market.models.rounds import (
    SKIP_BUDGET,
    SKIP_CHANGED,
    SKIP_GPUS_TAKEN,
    SKIP_HOLD_CONFLICT,
    SKIP_UNAVAILABLE,
    SKIP_UNCONFINED,
    use_key,
)
from market.selectors.book import Snapshot
from market.selectors.lost_work import lost_gpu_seconds
from market.selectors.waiting import COUNTS, SubqueryCount
from market.services.command_wake import commands_written
from market.services.commit_rows import JOB_FIELDS, JobRow, Placed, Slot, Winner
from market.services.gpu_standing import TAKEN, UNAVAILABLE, UNCONFINED, gpu_standing
from market.services.leases import STOP_COMMAND_TTL, stop_payload
from market.services.ledger_bulk import Share, ledger_hold_shares
from market.services.moves import GangReader, admit_moves, moved_winners
from market.services.reservations import record_fragmentation, record_reservations
from market.services.sandbox_bind import sandbox_fields, sandbox_payload

# How long a bind command stays valid: an agent that has not picked it up by then is treated as lost.
BIND_TTL = timedelta(minutes=30)


def hold_key(round_id: int, tenant_id: int) -> str:
    """The key of a tenant's one hold in a round: its winners there share it (docs/ledger.md §Holds)."""
    return f"round:{round_id}:tenant:{tenant_id}"


@dataclass
class CommitStats:
    winners: int = 0
    skipped: int = 0
    preemptions: int = 0
    gpus_allocated: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    moves: int = 0  # moved leases placed again (market.services.moves)
    moves_skipped: dict[str, int] = field(default_factory=dict)  # moves not placed again, by why
    outcomes: int = 0  # outcome rows written (a bid that lost as before writes none)


@dataclass(frozen=True)
class Locked:
    victims: list[Lease]  # live leases the result preempts, locked
    jobs: dict[int, JobRow]  # winners' and victims' jobs, locked


def commit_result(*, rnd: Round, snapshot: Snapshot, result: Result, now: datetime) -> CommitStats:
    """Write everything the result decided; the caller holds the transaction and the round's row lock."""
    type_ids = _type_ids(result)
    winners = _winners(result, snapshot.book, type_ids)
    locked = _lock(result, winners)
    preempted = _preempt(rnd=rnd, victims=locked.victims, why=result.preemptions, now=now)
    admitted, skipped = _admit(winners, locked.jobs, snapshot)
    # Moved leases' jobs, placed again on their new GPUs (market.services.moves): held with the winners (one
    # ledger call, one lock order), their leases bound once the old lease has let go of its GPUs.
    moving = moved_winners(result, locked.victims, _gangs(result))
    moving, move_skipped = admit_moves(moving, locked.jobs)
    # Losers (and winners skipped here) have waited this round too: that is derived, nothing to write; pending
    # jobs left out of the book must not count it. Job rows: after the winners' locks, before any account.
    _skip_round_for_absent(rnd, snapshot)
    placed_all = _hold(rnd, admitted + [m.winner for m in moving], locked.jobs, skipped)
    moved_jobs = {m.winner.job_id: m.old_lease for m in moving}
    for job_id in [j for j in skipped if j in moved_jobs]:
        move_skipped[job_id] = skipped.pop(job_id)
    placed = [p for p in placed_all if p.winner.job_id not in moved_jobs]
    placed_moves = [p for p in placed_all if p.winner.job_id in moved_jobs]
    backfilled = set(result.backfill_job.tolist())
    lease_ids = _insert_leases(rnd, placed + placed_moves, now, backfilled, moved_jobs)
    _insert_lease_gpus(placed + placed_moves, lease_ids)
    _insert_commands(rnd, placed, lease_ids[: len(placed)], now)  # a moved lease binds later
    _mark_allocated(placed, now)
    _retier(result)
    outcomes = _outcomes(rnd, snapshot, result, placed, winners, skipped, type_ids)
    _prices(rnd, snapshot.book, result, type_ids)
    record_reservations(rnd, result)  # a reserved node's type is the gang's
    record_fragmentation(rnd, snapshot.book, result, type_ids)
    return CommitStats(
        winners=len(placed),
        skipped=len(skipped),
        preemptions=len(preempted),
        gpus_allocated=sum(len(p.winner.gang) for p in placed),
        skipped_reasons=_count(skipped.values()),
        moves=len(placed_moves),
        moves_skipped=_count(move_skipped.values()),
        outcomes=outcomes,
    )


def _type_ids(result: Result) -> list[int]:
    """GPU type ids in the result's type order."""
    types = dict(GpuType.objects.values_list("name", "pk"))
    return [types[name] for name in result.type_names]


def _winners(result: Result, book: Book, type_ids: list[int]) -> list[Winner]:
    """The result's winners as typed rows, names resolved to ids: tenants by slug, GPUs by (node, index)."""
    tenants = dict(
        Tenant.objects.filter(slug__in=bulk.any_of(result.tenant_names, "text")).values_list("slug", "pk")
    )
    w = result.winners
    gangs = _gangs(result)(w.slot_ptr, w.slot_node, w.slot_idx)
    tenant_ids = [tenants[name] for name in result.tenant_names]
    return [
        Winner(job, tenant_ids[tenant], type_ids[gpu_type], TIER_NAMES[tier], price, hold, hold_s, gang)
        for job, tenant, gpu_type, tier, price, hold, hold_s, gang in zip(
            w.job.tolist(),
            w.tenant.tolist(),
            w.gpu_type.tolist(),
            w.tier.tolist(),
            w.price.tolist(),
            w.hold.tolist(),
            book.bids.max_s[w.bid].tolist(),
            gangs,
            strict=True,
        )
    ]


def _gangs(result: Result) -> GangReader:
    """A reader of gang tables (slot_ptr, slot_node, slot_idx: winners' or moves') as Slot tuples, names
    resolved to ids. Only the GPUs of nodes a gang landed on are read: in a busy fleet a few, not every GPU."""

    def read(ptr_a: Any, node_a: Any, idx_a: Any) -> list[tuple[Slot, ...]]:
        ptr, slot_node, slot_idx = ptr_a.tolist(), node_a.tolist(), idx_a.tolist()
        names = sorted({result.node_names[n] for n in slot_node})
        nodes = dict(Node.objects.filter(name__in=bulk.any_of(names, "text")).values_list("name", "pk"))
        node_ids = {n: nodes[result.node_names[n]] for n in set(slot_node)}
        gpus = {
            (node_id, index): Slot(pk, uuid, node_id)
            for pk, node_id, index, uuid in Gpu.objects.filter(
                node_id__in=bulk.any_of(sorted(nodes.values())), absent=False
            ).values_list("pk", "node_id", "index", "uuid")
        }
        return [
            tuple(gpus[node_ids[slot_node[j]], slot_idx[j]] for j in range(ptr[i], ptr[i + 1]))
            for i in range(len(ptr) - 1)
        ]

    return read


def _lock(result: Result, winners: list[Winner]) -> Locked:
    """The lock order of every path that touches leases and money (docs/rounds.md §Lock order): leases, then
    jobs, then holds, then accounts, each kind in id order. lease_stopped and job_cancel take a lease and then
    its job and its money; taking every lease this round changes before any job or account keeps the commit
    from waiting on them while they wait on it."""
    preempted = sorted(set(result.preemptions.lease.tolist()))
    retiered = sorted(set(result.retiered.tolist()))
    leases = {
        lease.pk: lease
        for lease in Lease.objects.select_for_update(no_key=True)
        .filter(pk__in=preempted + retiered, state__in=LIVE_LEASE_STATES)
        .order_by("pk")
    }
    victims = [leases[pk] for pk in preempted if pk in leases]
    job_ids = [w.job_id for w in winners] + [lease.job_id for lease in victims]
    rows = (
        Job.objects.select_for_update(no_key=True)
        .filter(pk__in=bulk.any_of(job_ids))
        .order_by("pk")
        .values_list(*JOB_FIELDS)
    )
    return Locked(victims=victims, jobs={row[0]: JobRow(*row) for row in rows})


def _admit(
    winners: list[Winner], jobs: dict[int, JobRow], snapshot: Snapshot
) -> tuple[list[Winner], dict[int, str]]:
    """Winners that can still be written, and why the others cannot ({job id: reason}, in winner order): the
    job changed since the freeze, a GPU was bound meanwhile, or a node went down, draining or retired (or a
    GPU was reported unhealthy): those take no work."""
    standing = gpu_standing(winners)
    reasons = {TAKEN: SKIP_GPUS_TAKEN, UNAVAILABLE: SKIP_UNAVAILABLE, UNCONFINED: SKIP_UNCONFINED}
    admitted: list[Winner] = []
    skipped: dict[int, str] = {}
    for w in winners:
        job = jobs.get(w.job_id)
        problem = standing.problem(w)
        if (
            job is None
            or job.state != JobState.PENDING
            or job.bid_version != snapshot.bid_versions.get(w.job_id)
        ):
            skipped[w.job_id] = SKIP_CHANGED
        elif problem is not None:
            skipped[w.job_id] = reasons[problem]
        else:
            admitted.append(w)
    return admitted, skipped


def _hold(
    rnd: Round, admitted: list[Winner], jobs: dict[int, JobRow], skipped: dict[int, str]
) -> list[Placed]:
    """The admitted winners' budget holds, one per tenant for its winners' sum (ledger_hold_shares), in
    winner order: a share that no longer fits the tenant's money, or whose tenant's key is taken by another
    hold, skips its winner (added to `skipped`)."""
    held = ledger_hold_shares(
        shares=[Share(tenant_id=w.tenant_id, amount=w.hold, ref=w.job_id) for w in admitted],
        key_of=lambda tenant_id: hold_key(rnd.pk, tenant_id),
        memo=f"round {rnd.pk}",
    )
    refused, conflicted = set(held.refused), set(held.conflicted)
    placed = []
    for w in admitted:
        if w.job_id in refused:
            skipped[w.job_id] = SKIP_BUDGET
        elif w.job_id in conflicted:
            skipped[w.job_id] = SKIP_HOLD_CONFLICT
        else:
            placed.append(Placed(w, jobs[w.job_id]))
    return placed


def _insert_leases(
    rnd: Round, placed: list[Placed], now: datetime, backfilled: set[int], moved: dict[int, int]
) -> list[int]:
    """One ALLOCATED lease per placed winner (and per moved job: `moved` maps its job to the lease it
    replaces); returns their ids in `placed` order. A winner the round started by backfill on a node reserved
    for a gang (`backfilled`, job ids) is marked so: the book tells the gang's claim which leases it may take."""
    n = len(placed)
    return bulk.insert(
        Lease,
        {
            "job_id": [p.winner.job_id for p in placed],
            "tenant_id": [p.winner.tenant_id for p in placed],
            "round_id": [rnd.pk] * n,
            "node_id": [p.winner.gang[0].node_id for p in placed],
            "gpu_type_id": [p.winner.gpu_type_id for p in placed],
            "tier": [p.winner.tier for p in placed],
            # A moved job's new lease is not preemptible until it is bound (market.services.moves.bind_moved):
            # no round may stop a job its agent has not started.
            "preemptible": [p.winner.tier != "G" and p.winner.job_id not in moved for p in placed],
            "price": [p.winner.price for p in placed],
            "gpus": [len(p.winner.gang) for p in placed],
            "max_seconds": [p.job.max_seconds for p in placed],
            "hold_seconds": [p.winner.hold_seconds for p in placed],
            "grace_seconds": [p.job.grace_seconds for p in placed],
            "hold_key": [hold_key(rnd.pk, p.winner.tenant_id) for p in placed],
            "hold_share": [p.winner.hold for p in placed],
            "state": [LeaseState.ALLOCATED] * n,
            "started_at": [now] * n,
            "end_reason": [""] * n,
            "backfill": [p.winner.job_id in backfilled for p in placed],
            "moved_from_id": [moved.get(p.winner.job_id) for p in placed],
        },
    )


def _insert_lease_gpus(placed: list[Placed], lease_ids: list[int]) -> None:
    """Each lease's GPUs, bound (active) from now on."""
    bound = [
        (lease_id, slot.gpu_id)
        for lease_id, p in zip(lease_ids, placed, strict=True)
        for slot in p.winner.gang
    ]
    bulk.insert(
        LeaseGpu,
        {"lease_id": [b[0] for b in bound], "gpu_id": [b[1] for b in bound], "active": [True] * len(bound)},
        ids=False,
    )


def _insert_commands(rnd: Round, placed: list[Placed], lease_ids: list[int], now: datetime) -> None:
    """A bind command per lease and node of its gang (a gang across nodes binds on each), fenced by the round."""
    rows: list[tuple[int, int, dict[str, object]]] = []  # (node id, lease id, payload)
    confine = sandbox_fields([p.job.id for p in placed])
    addresses = _node_addresses(placed)
    for lease_id, (w, job) in zip(lease_ids, placed, strict=True):
        by_node: dict[int, list[str]] = defaultdict(list)
        for slot in w.gang:
            by_node[slot.node_id].append(slot.uuid)
        gangs = gang_payloads(
            lease_id=lease_id,
            gpus_by_node=by_node,
            addresses=addresses,
            port_range=settings.GANG_PORT_RANGE,
        )
        for node_id, uuids in by_node.items():
            payload: dict[str, object] = {
                "lease": lease_id,
                "job": job.id,
                "name": job.name,
                "command": job.command,
                "gpus": uuids,
                "gang_gpus": len(w.gang),
                "max_seconds": job.max_seconds,
                "grace_seconds": job.grace_seconds,
                "price": w.price,
                **sandbox_payload(confine[job.id], len(uuids)),
                "gang": gangs[node_id],
            }
            rows.append((node_id, lease_id, payload))
    n = len(rows)
    bulk.insert(
        Command,
        {
            "node_id": [r[0] for r in rows],
            "lease_id": [r[1] for r in rows],
            "kind": [CommandKind.BIND] * n,
            "payload": [r[2] for r in rows],
            "fence": [rnd.pk] * n,
            "state": [CommandState.PENDING] * n,
            "created_at": [now] * n,
            "expires_at": [now + BIND_TTL] * n,
        },
        ids=False,
    )
    commands_written(node_ids=[r[0] for r in rows])


def _node_addresses(placed: list[Placed]) -> dict[int, tuple[str, str]]:
    """Node id -> (address, name) for every node a winner landed on (one query)."""
    node_ids = {slot.node_id for p in placed for slot in p.winner.gang}
    rows = Node.objects.filter(pk__in=bulk.any_of(sorted(node_ids))).values_list("pk", "address", "name")
    return {pk: (address, name) for pk, address, name in rows}


def _mark_allocated(placed: list[Placed], now: datetime) -> None:
    """The placed winners' jobs (locked, pending) are allocated; their wait is over."""
    n = len(placed)
    bulk.update(
        Job,
        [p.winner.job_id for p in placed],
        {"state": [JobState.ALLOCATED] * n, "waited_before": [0] * n, "updated_at": [now] * n},
    )


def _retier(result: Result) -> None:
    """Leases the allocator moved to tier G (locked by _lock) are no longer preemptible."""
    retiered = sorted(set(result.retiered.tolist()))
    if retiered:
        Lease.objects.filter(pk__in=bulk.any_of(retiered), state__in=LIVE_LEASE_STATES).update(
            tier="G", preemptible=False
        )


def _skip_round_for_absent(rnd: Round, snapshot: Snapshot) -> None:
    """Pending jobs that are not in this round's book (tenant inactive, GPU types gone, or pending only since
    the freeze) keep the count they had: their wait restarts after this round with what they had waited
    (market.selectors.waiting). Usually none; the statement reads the pending jobs' index once."""
    absent = Job.objects.filter(state=JobState.PENDING, wait_round__lt=rnd.pk).exclude(
        pk__in=bulk.any_of(snapshot.book.bids.job.tolist())
    )
    counted = (
        Round.objects.filter(COUNTS, pk__gt=OuterRef("wait_round"), pk__lt=rnd.pk).order_by().values("pk")
    )
    absent.update(waited_before=F("waited_before") + SubqueryCount(counted), wait_round=rnd.pk)


def _preempt(*, rnd: Round, victims: list[Lease], why: Preemptions, now: datetime) -> list[int]:
    """Victims (live, locked, with their jobs) become STOPPING with a preempt command per node; their GPUs
    pass to this round's winners (the agent runs the preempt before the bind that reuses them: commands are
    ordered by id). Each keeps why: the allocator's rule (``why.reason``, by its stable name) and the job it
    made room for (``why.for_job``), taken from the result by lease id, so a replayed commit writes the same."""
    ids = [lease.pk for lease in victims]
    if not ids:
        return []
    rule = dict(zip(why.lease.tolist(), (PREEMPT_NAMES[r] for r in why.reason.tolist()), strict=True))
    # A rule with no claimant (-1) keeps none: a null reference, never one to a job that is not there.
    claimant = {
        lease: (job if job >= 0 else None)
        for lease, job in zip(why.lease.tolist(), why.for_job.tolist(), strict=True)
    }
    nodes: dict[int, set[int]] = defaultdict(set)
    for lease_id, node_id in LeaseGpu.objects.filter(lease_id__in=ids, active=True).values_list(
        "lease_id", "gpu__node_id"
    ):
        nodes[lease_id].add(node_id)
    LeaseGpu.objects.filter(lease_id__in=ids, active=True).update(active=False)
    for lease in victims:
        lease.state, lease.stop_requested_at, lease.end_reason = LeaseState.STOPPING, now, EndReason.PREEMPTED
        lease.preempt_reason, lease.preempted_round_id = rule[lease.pk], rnd.pk
        lease.preempted_for_id = claimant[lease.pk]
        lease.lost_gpu_s = lost_gpu_seconds(lease, now)
    n = len(victims)
    bulk.update(
        Lease,
        ids,
        {
            "state": [LeaseState.STOPPING] * n,
            "stop_requested_at": [now] * n,
            "end_reason": [EndReason.PREEMPTED] * n,
            "preempt_reason": [lease.preempt_reason for lease in victims],
            "preempted_round_id": [rnd.pk] * n,
            "preempted_for_id": [lease.preempted_for_id for lease in victims],
            "lost_gpu_s": [lease.lost_gpu_s for lease in victims],
        },
    )
    stops = [(lease, node_id) for lease in victims for node_id in sorted(nodes[lease.pk])]
    bulk.insert(
        Command,
        {
            "node_id": [node_id for _lease, node_id in stops],
            "lease_id": [lease.pk for lease, _node in stops],
            "kind": [CommandKind.PREEMPT] * len(stops),
            "payload": [stop_payload(lease, CommandKind.PREEMPT) for lease, _node in stops],
            "fence": [rnd.pk] * len(stops),
            "state": [CommandState.PENDING] * len(stops),
            "created_at": [now] * len(stops),
            "expires_at": [
                now + timedelta(seconds=lease.grace_seconds) + STOP_COMMAND_TTL for lease, _node in stops
            ],
        },
        ids=False,
    )
    commands_written(node_ids=[n for lease in victims for n in nodes[lease.pk]])
    Job.objects.filter(pk__in=[lease.job_id for lease in victims]).exclude(state=JobState.CANCELLED).update(
        state=JobState.PREEMPTING, updated_at=now
    )
    return ids


def _outcomes(
    rnd: Round,
    snapshot: Snapshot,
    result: Result,
    placed: list[Placed],
    winners: list[Winner],
    skipped: dict[int, str],
    type_ids: list[int],
) -> int:
    """A row per bid whose outcome changed (docs/rounds.md §At fleet scale, writing less): winners placed and
    winners skipped at commit (with why) always, a loser (with why) only when its outcome differs from its
    job's newest row. Built as columns, a list per field, since a first round writes 200,000 of them. Returns
    the rows written."""
    versions = snapshot.bid_versions
    by_job = {w.job_id: w for w in winners}
    won = [p.winner for p in placed]
    lost = [by_job[job] for job in skipped]
    lo = result.losers
    lose_jobs = lo.job.tolist()
    lose_types = [type_ids[t] for t in lo.gpu_type.tolist()]
    lose_reasons = [REASON_NAMES[r] for r in lo.reason.tolist()]
    lose_figures = [None if f < 0 else f for f in lo.figure.tolist()]
    _record_losses(rnd, snapshot, result, lose_jobs, lose_reasons, skipped)
    newest = newest_outcomes(lose_jobs)
    keep = [
        i
        for i, job in enumerate(lose_jobs)
        if newest.get(job) != (versions[job], lose_types[i], lose_reasons[i], lose_figures[i])
    ]
    lose_jobs = [lose_jobs[i] for i in keep]
    jobs = [w.job_id for w in won] + list(skipped) + lose_jobs
    n_won, n = len(won), len(jobs)
    bulk.insert(
        BidOutcome,
        {
            "round_id": [rnd.pk] * n,
            "job_id": jobs,
            "bid_version": [versions[job] for job in jobs],
            "won": [True] * n_won + [False] * (n - n_won),
            "tier": [w.tier for w in won] + [""] * (n - n_won),
            "gpu_type_id": [w.gpu_type_id for w in won + lost] + [lose_types[i] for i in keep],
            "price": [w.price for w in won + lost] + [None] * len(lose_jobs),
            "reason": [""] * n_won + list(skipped.values()) + [lose_reasons[i] for i in keep],
            "figure": [None] * (n_won + len(skipped)) + [lose_figures[i] for i in keep],
        },
        ids=False,
    )
    return n


# The newest outcome of each job that still stands for the rounds since: a loss, written no earlier than the
# job's wait mark (a job left out of a round, or requeued, has its wait_round moved past its older rows, so the
# next row is written again: an unchanged row only stands for rounds the job was in). Read through the
# (job, round) unique index, one probe per job.
_NEWEST_SQL = """
SELECT o.job_id, o.bid_version, o.gpu_type_id, o.reason, o.figure
FROM market_job j
CROSS JOIN LATERAL (
    SELECT b.job_id, b.round_id, b.won, b.bid_version, b.gpu_type_id, b.reason, b.figure
    FROM market_bidoutcome b WHERE b.job_id = j.id ORDER BY b.round_id DESC LIMIT 1
) o
WHERE j.id = ANY(%s::bigint[]) AND NOT o.won AND o.round_id >= j.wait_round
"""


def newest_outcomes(job_ids: list[int]) -> dict[int, tuple[int, int | None, str, int | None]]:
    """{job: (bid version, GPU type, reason, figure)} of the jobs' newest outcomes that a repeat of them
    need not be written for (_NEWEST_SQL says which)."""
    if not job_ids:
        return {}
    if connection.vendor != "postgresql":  # SQLite (local runs): the same rule through the ORM
        marks = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "wait_round"))
        out: dict[int, tuple[int, int | None, str, int | None]] = {}
        for o in BidOutcome.objects.filter(job_id__in=job_ids).order_by("job_id", "-round_id"):
            if o.job_id not in out and not o.won and o.round_id >= marks[o.job_id]:
                out[o.job_id] = (o.bid_version, o.gpu_type_id, o.reason, o.figure)
            out.setdefault(o.job_id, (-1, None, "", None))
        return out
    with connection.cursor() as cur:
        cur.execute(_NEWEST_SQL, ["{" + ",".join(map(str, job_ids)) + "}"])
        return {job: (version, t, reason, figure) for job, version, t, reason, figure in cur.fetchall()}


def _record_losses(
    rnd: Round,
    snapshot: Snapshot,
    result: Result,
    lose_jobs: list[int],
    lose_reasons: list[str],
    skipped: dict[int, str],
) -> None:
    """The round's losses counted by tenant and reason (RoundLoss): what the fair-share diagnosis reads, since
    an unchanged loss writes no outcome row. A few rows per losing tenant, not one per bid."""
    bids = snapshot.book.bids
    tenant_of = dict(zip(bids.job.tolist(), bids.tenant.tolist(), strict=True))
    tenant_ids = dict(
        Tenant.objects.filter(slug__in=bulk.any_of(result.tenant_names, "text")).values_list("slug", "pk")
    )
    ids = [tenant_ids.get(name) for name in result.tenant_names]
    counts: dict[tuple[int, str], int] = defaultdict(int)
    for job, reason in [*zip(lose_jobs, lose_reasons, strict=True), *skipped.items()]:
        tenant = ids[tenant_of[job]] if tenant_of.get(job) is not None else None
        if tenant is not None:
            counts[tenant, reason] += 1
    keys = sorted(counts)
    bulk.insert(
        RoundLoss,
        {
            "round_id": [rnd.pk] * len(keys),
            "tenant_id": [t for t, _r in keys],
            "reason": [r for _t, r in keys],
            "bids": [counts[k] for k in keys],
        },
        ids=False,
    )


def _prices(rnd: Round, book: Book, result: Result, type_ids: list[int]) -> None:
    posted_now, reserve = book.types.posted.tolist(), book.types.reserve.tolist()
    spot, nxt = result.spot_price.tolist(), result.posted.tolist()
    RoundPrice.objects.bulk_create(
        RoundPrice(
            round=rnd,
            gpu_type_id=type_ids[k],
            reserve=reserve[k],
            posted=posted_now[k],
            spot=None if spot[k] < 0 else spot[k],
            next_posted=nxt[k],
        )
        for k in range(len(type_ids))
    )
    for k, type_id in enumerate(type_ids):
        GpuType.objects.filter(pk=type_id).update(posted_price=nxt[k])


def _count(reasons: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return counts


def busy_evidence(book: Book, result: Result) -> dict[str, int]:
    """For each GPU type where a bid lost as busy (no GPU left for spot, allocator.result.BUSY): the type's GPUs
    after the round, by the tier of the lease holding them, and those left free, as Round.counters entries
    (market.models.rounds.use_key). The evidence the waiting job's sentence names (market.selectors.explain);
    empty when no bid lost so. Counted from the clearing's decision: a winner the commit skips is counted."""
    lo = result.losers
    types = sorted(set(lo.gpu_type[lo.reason == BUSY].tolist()))
    if not types:
        return {}
    ls, w = book.leases, result.winners
    kept = ~np.isin(ls.lease, result.preemptions.lease)
    won_gpus = np.diff(w.slot_ptr)
    out: dict[str, int] = {}
    for t in types:
        name = book.types.names[t]
        for tier, part in enumerate(TIER_NAMES):
            held = ls.gpus[kept & (ls.gpu_type == t) & (ls.tier == tier)].sum()
            won = won_gpus[(w.gpu_type == t) & (w.tier == tier)].sum()
            out[use_key(part, name)] = int(held + won)
        free = book.nodes.free[book.nodes.gpu_type == t].sum()
        freed = ls.gpus[~kept & (ls.gpu_type == t)].sum()
        out[use_key("free", name)] = int(free + freed - won_gpus[w.gpu_type == t].sum())
    return out
