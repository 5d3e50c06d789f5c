"""Step 8 of the clearing: write one round's result in one transaction (ARCHITECTURE.md §Clearing, Commit).

Leases, their GPUs, budget holds, outbox commands, preemptions, per-bid outcomes and prices are written with
bulk statements, a fixed number per round rather than a query per job. The result is mapped back through
names (type name, node name, tenant slug, GPU index), so a commit resumed from a stored snapshot in another
process writes exactly what the first attempt would have.

A winner is dropped (its outcome says why) when its job changed after the freeze (cancelled or bid amended),
when one of its GPUs was bound meanwhile, when its hold no longer fits the tenant's money, or when its hold's
key was already used for another hold (counted; the rest of the round goes on).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.db.models import F, OuterRef, Q

from accounts.models import Tenant
from allocator import PREEMPT_NAMES, REASON_NAMES, TIER_NAMES, Book, Preemptions, Result
from market import bulk
from market.models import (
    LIVE_LEASE_STATES,
    BidOutcome,
    Command,
    CommandKind,
    CommandState,
    EndReason,
    GpuType,
    Job,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
    Round,
    RoundPrice,
)
from market.selectors.book import Snapshot
from market.selectors.lost_work import lost_gpu_seconds
from market.selectors.waiting import COUNTS, SubqueryCount
from market.services.command_wake import commands_written
from market.services.leases import STOP_COMMAND_TTL, stop_payload
from market.services.ledger_bulk import HoldRequest, ledger_hold_many
from nodeagent.models import Gpu, Node

# How long a bind command stays valid: an agent that has not picked it up by then is treated as lost.
BIND_TTL = timedelta(minutes=30)

SKIP_CHANGED = "job_changed_during_round"
SKIP_GPUS_TAKEN = "gpus_taken_during_round"
SKIP_BUDGET = "over_budget_at_commit"
SKIP_HOLD_CONFLICT = "hold_key_conflict"
SKIP_UNAVAILABLE = "gpus_unavailable_during_round"


def hold_key(round_id: int, job_id: int) -> str:
    return f"round:{round_id}:job:{job_id}"


@dataclass
class CommitStats:
    winners: int = 0
    skipped: int = 0
    preemptions: int = 0
    gpus_allocated: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)


def commit_result(*, rnd: Round, snapshot: Snapshot, result: Result, now: datetime) -> CommitStats:
    """Write everything the result decided; the caller holds the transaction and the round's row lock."""
    book = snapshot.book
    stats = CommitStats()
    types = dict(GpuType.objects.values_list("name", "pk"))
    tenants = dict(
        Tenant.objects.filter(slug__in=bulk.any_of(result.tenant_names, "text")).values_list("slug", "pk")
    )
    nodes = dict(
        Node.objects.filter(name__in=bulk.any_of(result.node_names, "text")).values_list("name", "pk")
    )
    node_id_of = np.array([nodes[name] for name in result.node_names], dtype=np.int64)
    gpu_of = {
        (node_id, index): (pk, uuid)
        for pk, node_id, index, uuid in Gpu.objects.filter(
            node_id__in=bulk.any_of(list(nodes.values())), absent=False
        ).values_list("pk", "node_id", "index", "uuid")
    }

    w = result.winners
    win_jobs = w.job.tolist()
    # The lock order of every path that touches leases and money (docs/rounds.md §Lock order): leases,
    # then jobs, then holds, then accounts, each kind in id order. lease_stopped and job_cancel take a lease
    # and then its job and its money; taking every lease this round changes before any job or account keeps
    # the commit from waiting on them while they wait on it.
    preempted = sorted(set(result.preemptions.lease.tolist()))
    retiered = sorted(set(result.retiered.tolist()))
    leases = {
        lease.pk: lease
        for lease in Lease.objects.select_for_update()
        .filter(pk__in=preempted + retiered, state__in=LIVE_LEASE_STATES)
        .order_by("pk")
    }
    victim_jobs = [leases[pk].job_id for pk in preempted if pk in leases]
    jobs = {
        row[0]: row
        for row in Job.objects.select_for_update()
        .filter(pk__in=bulk.any_of(win_jobs + victim_jobs))
        .order_by("pk")
        .values_list("pk", "state", "bid_version", "name", "command", "grace_seconds", "max_seconds", "gpus")
    }

    victims = _preempt(
        rnd=rnd, victims=[leases[pk] for pk in preempted if pk in leases], why=result.preemptions, now=now
    )
    stats.preemptions = len(victims)

    # Which winners can still be written.
    ptr = w.slot_ptr.tolist()
    slot_node = node_id_of[w.slot_node].tolist()
    slot_idx = w.slot_idx.tolist()
    gangs: list[list[tuple[int, str, int]]] = []  # per winner: (gpu id, uuid, node id)
    for i in range(len(win_jobs)):
        gangs.append([(*gpu_of[slot_node[j], slot_idx[j]], slot_node[j]) for j in range(ptr[i], ptr[i + 1])])
    taken = set(
        LeaseGpu.objects.filter(
            active=True, gpu_id__in=bulk.any_of([g[0] for gang in gangs for g in gang])
        ).values_list("gpu_id", flat=True)
    )
    # A node that went down, draining or retired since the freeze, or a GPU reported unhealthy, takes no work.
    unavailable = set(
        Gpu.objects.filter(pk__in=bulk.any_of([g[0] for gang in gangs for g in gang]))
        .filter(Q(healthy=False) | ~Q(node__state=Node.State.UP))
        .values_list("pk", flat=True)
    )
    skipped: dict[int, str] = {}
    candidates = []
    for i, job_id in enumerate(win_jobs):
        job = jobs.get(job_id)
        if job is None or job[1] != JobState.PENDING or job[2] != snapshot.bid_versions.get(job_id):
            skipped[job_id] = SKIP_CHANGED
        elif any(g[0] in taken for g in gangs[i]):
            skipped[job_id] = SKIP_GPUS_TAKEN
        elif any(g[0] in unavailable for g in gangs[i]):
            skipped[job_id] = SKIP_UNAVAILABLE
        else:
            candidates.append(i)

    # Losers (and winners skipped here) have waited this round too: that is derived, nothing to write; pending
    # jobs left out of the book must not count it. Job rows: after the winners' locks, before any account.
    _skip_round_for_absent(rnd, snapshot)

    tenant_of = [tenants[name] for name in result.tenant_names]
    w_tenant, w_hold = w.tenant.tolist(), w.hold.tolist()
    held = ledger_hold_many(
        [
            HoldRequest(
                tenant_id=tenant_of[w_tenant[i]],
                amount=w_hold[i],
                key=hold_key(rnd.pk, win_jobs[i]),
                memo=f"round {rnd.pk}, job {win_jobs[i]}",
            )
            for i in candidates
        ]
    )
    refused, conflicted = set(held.refused), set(held.conflicted)
    placed = []
    for i in candidates:
        key = hold_key(rnd.pk, win_jobs[i])
        if key in refused or key in conflicted:
            skipped[win_jobs[i]] = SKIP_BUDGET if key in refused else SKIP_HOLD_CONFLICT
        else:
            placed.append(i)

    w_tier, w_type, w_price = w.tier.tolist(), w.gpu_type.tolist(), w.price.tolist()
    # What each hold pays for: the bid's max_s in the frozen book (max hours, or a predicted p90 when the
    # tenant sizes holds by prediction: market.selectors.holds).
    hold_s = dict(zip(book.bids.job.tolist(), book.bids.max_s.tolist(), strict=True))
    type_id_of = [types[name] for name in result.type_names]
    n = len(placed)
    lease_ids = bulk.insert(
        Lease,
        {
            "job_id": [win_jobs[i] for i in placed],
            "tenant_id": [tenant_of[w_tenant[i]] for i in placed],
            "round_id": [rnd.pk] * n,
            "node_id": [gangs[i][0][2] for i in placed],
            "gpu_type_id": [type_id_of[w_type[i]] for i in placed],
            "tier": [TIER_NAMES[w_tier[i]] for i in placed],
            "preemptible": [TIER_NAMES[w_tier[i]] != "G" for i in placed],
            "price": [w_price[i] for i in placed],
            "gpus": [len(gangs[i]) for i in placed],
            "max_seconds": [jobs[win_jobs[i]][6] for i in placed],
            "hold_seconds": [hold_s[win_jobs[i]] for i in placed],
            "grace_seconds": [jobs[win_jobs[i]][5] for i in placed],
            "hold_key": [hold_key(rnd.pk, win_jobs[i]) for i in placed],
            "state": [LeaseState.ALLOCATED] * n,
            "started_at": [now] * n,
            "end_reason": [""] * n,
        },
    )
    bound = [(lease_id, g[0]) for lease_id, i in zip(lease_ids, placed, strict=True) for g in gangs[i]]
    bulk.insert(
        LeaseGpu,
        {"lease_id": [b[0] for b in bound], "gpu_id": [b[1] for b in bound], "active": [True] * len(bound)},
        ids=False,
    )
    commands: dict[str, list[object]] = {
        k: []
        for k in ("node_id", "lease_id", "kind", "payload", "fence", "state", "created_at", "expires_at")
    }
    for lease_id, i in zip(lease_ids, placed, strict=True):
        job = jobs[win_jobs[i]]
        by_node: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for g in gangs[i]:
            by_node[g[2]].append(g)
        for node_id, gpus in by_node.items():
            payload = {
                "lease": lease_id,
                "job": job[0],
                "name": job[3],
                "command": job[4],
                "gpus": [g[1] for g in gpus],
                "gang_gpus": len(gangs[i]),
                "max_seconds": job[6],
                "grace_seconds": job[5],
                "price": w_price[i],
            }
            for key, value in (
                ("node_id", node_id),
                ("lease_id", lease_id),
                ("kind", CommandKind.BIND),
                ("payload", payload),
                ("fence", rnd.pk),
                ("state", CommandState.PENDING),
                ("created_at", now),
                ("expires_at", now + BIND_TTL),
            ):
                commands[key].append(value)
    bulk.insert(Command, commands, ids=False)
    commands_written(node_ids=commands["node_id"])  # type: ignore[arg-type]
    Job.objects.filter(pk__in=bulk.any_of([win_jobs[i] for i in placed])).update(
        state=JobState.ALLOCATED, waited_before=0, updated_at=now
    )
    if retiered:  # locked above
        Lease.objects.filter(pk__in=bulk.any_of(retiered), state__in=LIVE_LEASE_STATES).update(
            tier="G", preemptible=False
        )

    _outcomes(rnd, snapshot, result, placed, skipped, type_id_of)
    _prices(rnd, book, result, type_id_of)
    stats.winners = len(placed)
    stats.skipped = len(skipped)
    stats.gpus_allocated = sum(len(gangs[i]) for i in placed)
    for reason in skipped.values():
        stats.skipped_reasons[reason] = stats.skipped_reasons.get(reason, 0) + 1
    return stats


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
    claimant = dict(zip(why.lease.tolist(), why.for_job.tolist(), strict=True))
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
    Lease.objects.bulk_update(
        victims,
        [
            "state",
            "stop_requested_at",
            "end_reason",
            "preempt_reason",
            "preempted_round",
            "preempted_for",
            "lost_gpu_s",
        ],
    )
    Command.objects.bulk_create(
        Command(
            node_id=node_id,
            lease=lease,
            kind=CommandKind.PREEMPT,
            fence=rnd.pk,
            expires_at=now + timedelta(seconds=lease.grace_seconds) + STOP_COMMAND_TTL,
            payload=stop_payload(lease, CommandKind.PREEMPT),
        )
        for lease in victims
        for node_id in sorted(nodes[lease.pk])
    )
    commands_written(node_ids=[n for lease in victims for n in nodes[lease.pk]])
    Job.objects.filter(pk__in=[lease.job_id for lease in victims]).exclude(state=JobState.CANCELLED).update(
        state=JobState.PREEMPTING, updated_at=now
    )
    return [lease.pk for lease in victims]


def _outcomes(
    rnd: Round,
    snapshot: Snapshot,
    result: Result,
    placed: list[int],
    skipped: dict[int, str],
    type_id_of: list[int],
) -> None:
    """One row per bid: winners placed, winners skipped at commit (with why), losers (with why). Built as
    columns, a list per field, since a round writes 20,000 of them."""
    versions = snapshot.bid_versions
    w, lo = result.winners, result.losers
    win_jobs, tiers, wtypes, prices = w.job.tolist(), w.tier.tolist(), w.gpu_type.tolist(), w.price.tolist()
    by_job = {job: i for i, job in enumerate(win_jobs)}
    skip_rows = [by_job[job] for job in skipped]
    lose_jobs = lo.job.tolist()
    jobs = [win_jobs[i] for i in placed] + list(skipped) + lose_jobs
    n_won, n = len(placed), len(jobs)
    reason_names = [REASON_NAMES[r] for r in lo.reason.tolist()]
    bulk.insert(
        BidOutcome,
        {
            "round_id": [rnd.pk] * n,
            "job_id": jobs,
            "bid_version": [versions[job] for job in jobs],
            "won": [True] * n_won + [False] * (n - n_won),
            "tier": [TIER_NAMES[tiers[i]] for i in placed] + [""] * (n - n_won),
            "gpu_type_id": [
                type_id_of[t] for t in [wtypes[i] for i in placed + skip_rows] + lo.gpu_type.tolist()
            ],
            "price": [prices[i] for i in placed + skip_rows] + [None] * len(lose_jobs),
            "reason": [""] * n_won + list(skipped.values()) + reason_names,
            "figure": [None] * (n_won + len(skipped)) + [None if f < 0 else f for f in lo.figure.tolist()],
        },
        ids=False,
    )


def _prices(rnd: Round, book: Book, result: Result, type_id_of: list[int]) -> None:
    posted_now, reserve = book.types.posted.tolist(), book.types.reserve.tolist()
    spot, nxt = result.spot_price.tolist(), result.posted.tolist()
    RoundPrice.objects.bulk_create(
        RoundPrice(
            round=rnd,
            gpu_type_id=type_id_of[k],
            reserve=reserve[k],
            posted=posted_now[k],
            spot=None if spot[k] < 0 else spot[k],
            next_posted=nxt[k],
        )
        for k in range(len(type_id_of))
    )
    for k, type_id in enumerate(type_id_of):
        GpuType.objects.filter(pk=type_id).update(posted_price=nxt[k])
