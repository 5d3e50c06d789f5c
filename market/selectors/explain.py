"""Why a job did or did not run: one plain sentence per round outcome, its place in each queue, and why
each of its leases ended.

The sentences are built from what the round stored (BidOutcome's reason and figure, RoundPrice) and the bid
version the round saw, so they say what the round knew, not what is true now. A loss is stored only when it
changed, so a row stands for the rounds up to the job's next one, and its sentence names the newest of them. docs/allocator.md lists the
reasons and the meaning of each figure.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from config.money import format_fixed
from market.models import BidOutcome, EndReason, Job, JobState, Lease, PreemptReason, Round, RoundPrice
from market.models.rounds import (
    BUSY,
    SKIP_BUDGET,
    SKIP_CHANGED,
    SKIP_GPUS_TAKEN,
    SKIP_HOLD_CONFLICT,
    SKIP_UNAVAILABLE,
    SKIP_UNCONFINED,
    USE_PARTS,
    use_key,
)
from market.selectors.lost_work import gpu_time
from market.selectors.policy import market_policy
from market.selectors.preemptions import preemption_of
from market.selectors.waiting import COUNTS

TIER_WORDS = {"G": "guaranteed", "B": "borrowed", "S": "spot"}


def _c(micro: int, *, up: bool = False) -> str:
    return format_fixed(micro, up=up)


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Explained:
    outcome: BidOutcome
    sentence: str
    price: RoundPrice | None  # of the outcome's type in round `until`
    until: int = 0  # the newest round the outcome stands for (an unchanged loss writes no row: _runs)


@dataclass(frozen=True)
class TypeUse:
    """One GPU type's GPUs after a round, by the tier of the lease holding them, and those left free: the
    evidence the commit kept for a round where some bid lost as busy (Round.counters, use_key)."""

    guaranteed: int
    borrowed: int
    spot: int
    free: int

    @classmethod
    def of(cls, counters: dict[str, object], gpu_type: str) -> TypeUse | None:
        parts = [counters.get(use_key(part, gpu_type)) for part in USE_PARTS]
        if not all(isinstance(v, int) for v in parts):
            return None  # a round from before the evidence was kept, or no busy bid of this type in it
        g, b, s, free = (int(v) for v in parts if isinstance(v, int))
        return cls(g, b, s, free)


def _limit(history: Sequence[object], version: int, gpu_type: str) -> int | None:
    for bid in history:
        if getattr(bid, "version", None) == version:
            for entry in getattr(bid, "limits", []):
                if entry["gpu_type"] == gpu_type:
                    return int(entry["limit"])
    return None


def _is_busy(o: BidOutcome) -> bool:
    """Lost because no GPU was left for spot; rounds before the busy reason stored it as outbid with no figure."""
    no_figure = o.figure is None or o.figure < 0
    return not o.won and (o.reason == BUSY or (o.reason == "outbid" and no_figure))


def _busy(job: Job, t: str, round_id: int, use: TypeUse | None) -> str:
    """No GPU of the type was left for spot bids and no bid outbid this one: the round's own figures, not a price
    that would have won (none would have)."""
    if use is None:
        evidence = f"guaranteed and borrowed jobs held or claimed every {t} GPU"
    else:
        held = use.guaranteed + use.borrowed + use.spot
        evidence = (
            f"after it, {held} {t} GPU{'s were' if held != 1 else ' was'} in use ({use.guaranteed} guaranteed, "
            f"{use.borrowed} borrowed, {use.spot} spot)"
        )
        if use.free:
            evidence += f" and {use.free} free but not offered to spot bids (kept by the guaranteed and borrowed tiers)"
    return (
        f"Waiting for free {t} GPUs: in round {round_id} none was left for spot bids: {evidence}. No higher bid "
        f"took its place, so a higher limit would not have helped; it stays queued and can win when running "
        f"{t} jobs end and free {_gpus(job.gpus)}."
    )


def _sentence(
    job: Job,
    o: BidOutcome,
    price: RoundPrice | None,
    limit: int | None,
    waited: int,
    use: TypeUse | None = None,
    round_id: int | None = None,
) -> str:
    """One plain sentence for an outcome. Every figure it names is one the round stored; a figure that is missing
    (null, or an outcome from before it was recorded) leaves its clause out, never a placeholder."""
    t = o.gpu_type.name if o.gpu_type else "GPU"
    fig = o.figure if o.figure is not None and o.figure >= 0 else None
    your_limit = f"your limit {_c(limit)}" if limit is not None else "your limit"
    if o.won:
        at = f" at {_c(o.price)} credits per GPU-hour" if o.price is not None else ""
        return f"Won {job.gpus} {t} GPU{'s' if job.gpus != 1 else ''} in tier {o.tier} ({TIER_WORDS.get(o.tier, o.tier)}){at}."
    if _is_busy(o):
        return _busy(job, t, round_id if round_id is not None else o.round_id, use)
    if o.reason == "outbid":
        assert fig is not None  # the case above took the outcomes without one
        spot = price.spot if price is not None and price.spot is not None else fig - 1
        lowest = f"the lowest winning {t} price was {_c(spot)} credits per GPU-hour"
        if limit is not None and fig <= limit:
            # Ties at the price go by submit time: the GPUs ran out before this bid's turn.
            return (
                f"Outbid: {lowest}; bids at your limit {_c(limit)} are served oldest first and the GPUs ran "
                f"out before yours; any higher limit puts it ahead of them."
            )
        return f"Outbid: {lowest}; a limit of {_c(fig, up=True)} would have won {_gpus(job.gpus)}."
    if o.reason == "guarantee_full_below_posted":
        posted = f" {_c(fig, up=True)}" if fig is not None else ""
        advice = (
            f"a limit of at least {_c(fig, up=True)} would put it in the borrowed tier"
            if fig is not None
            else "a limit at or above the posted price would put it in the borrowed tier"
        )
        return (
            f"Guarantee full and {your_limit} is below the posted {t} price{posted}, with no spot GPUs left; "
            f"{advice}."
        )
    if o.reason == "below_reserve":
        if fig is None:
            return f"{_upper(your_limit)} is below the {t} reserve price, so it could not win; bid at least the reserve."
        return (
            f"{_upper(your_limit)} is below the {t} reserve price {_c(fig, up=True)}, so it could not win; "
            f"bid at least {_c(fig, up=True)}."
        )
    if o.reason == "over_budget":
        hold = f"a hold of {_c(fig)} credits" if fig is not None else "a hold"
        return (
            f"Over budget: it needed {hold} ({job.gpus} GPUs × the maximum hours × your "
            f"limit) and the team had less available; a top-up, fewer hours or a lower limit would let it in."
        )
    if o.reason == "no_node_fits":
        rounds_left = market_policy().starve_rounds - waited
        later = (
            f"nodes are reserved for it in {rounds_left} more round{'s' if rounds_left != 1 else ''}"
            if rounds_left > 0
            else "nodes are now being reserved for it"
        )
        largest = f" (the largest gang that could still be placed was {fig})" if fig is not None else ""
        return f"No node has {job.gpus} free {t} GPUs{largest}; {later}."
    if o.reason == SKIP_CHANGED:
        return "It won, but its bid changed or it was cancelled during the round; the next round uses the new bid."
    if o.reason == SKIP_GPUS_TAKEN:
        return (
            "It won, but its GPUs were taken before the round committed; it stays queued for the next round."
        )
    if o.reason == SKIP_UNAVAILABLE:
        return (
            "It won, but a node it was placed on went down, began draining or reported a GPU unhealthy before the "
            "round committed; it stays queued for the next round."
        )
    if o.reason == SKIP_UNCONFINED:
        return (
            "It won, but the node it was placed on cannot sandbox jobs (its kernel refused the sandbox), and only "
            "trusted teams' jobs run there; it stays queued for the next round."
        )
    if o.reason == SKIP_BUDGET:
        at = f" at {_c(o.price)} credits per GPU-hour" if o.price is not None else ""
        return (
            f"It won{at}, but by the commit its hold no longer fitted the "
            "team's available money; a top-up would let it in."
        )
    if o.reason == SKIP_HOLD_CONFLICT:
        return (
            "It won, but its budget hold for this round already existed (a retried commit); it stays queued for "
            "the next round."
        )
    return f"Did not run ({o.reason or 'no reason recorded'})."


def explain_outcomes(job: Job, outcomes: Iterable[BidOutcome], history: Sequence[object]) -> list[Explained]:
    """The outcomes (newest first, as given: the job's newest first) each with its sentence and the price of
    its type in the newest round it stands for. A loss is written only when it differs from the job's row
    before (docs/rounds.md §At fleet scale, writing less), so a loss row stands for every round from its own
    to the round before the job's next row (or, the newest, to the newest round the job was in): its sentence
    names that round's facts, and the rounds waited count them all."""
    rows = list(outcomes)
    until, rounds = _runs(job, rows)
    # Keyed as the outcomes ask: an outcome's type may be gone (null), and then no price matches.
    prices: dict[tuple[int, int | None], RoundPrice] = {
        (p.round_id, p.gpu_type_id): p for p in RoundPrice.objects.filter(round_id__in=set(until.values()))
    }
    # The evidence busy outcomes name: their rounds' counters, in one read.
    busy_rounds = {until[o.pk] for o in rows if _is_busy(o)}
    counters: dict[int, dict[str, object]] = (
        dict(Round.objects.filter(pk__in=busy_rounds).values_list("pk", "counters")) if busy_rounds else {}
    )
    # Rounds waited when each outcome was decided: consecutive losing rounds, counted oldest first.
    waited: dict[int, int] = {}
    run = 0
    for o in reversed(rows):
        run = 0 if o.won else run + rounds[o.pk]
        waited[o.pk] = run
    out = []
    for o in rows:
        at = until[o.pk]
        price = prices.get((at, o.gpu_type_id))
        limit = _limit(history, o.bid_version, o.gpu_type.name) if o.gpu_type else None
        use = TypeUse.of(counters.get(at) or {}, o.gpu_type.name) if o.gpu_type else None
        out.append(Explained(o, _sentence(job, o, price, limit, waited[o.pk], use, at), price, at))
    return out


def _runs(job: Job, rows: list[BidOutcome]) -> tuple[dict[int, int], dict[int, int]]:
    """For each outcome (newest first): the newest round it stands for, and how many rounds that is. A win
    stands for its own round only. A loss stands for the rounds that committed a book (market.selectors.
    waiting.COUNTS) from its own up to before the job's next row; the newest one, while the job is pending,
    up to the newest such round, or to before its wait mark when that moved past the row (the job was left
    out of a round, and its next row is written again); once the job left pending (cancelled), up to the
    last round frozen before it did."""
    losses = [o for o in rows if not o.won]
    if not losses:
        return {o.pk: o.round_id for o in rows}, {o.pk: 1 for o in rows}
    counting = list(
        Round.objects.filter(COUNTS, pk__gte=min(o.round_id for o in losses))
        .order_by("pk")
        .values_list("pk", "frozen_at")
    )
    ids = [pk for pk, _at in counting]
    until, rounds = {}, {}
    newer: int | None = None  # the round of the next newer row
    for o in rows:
        bound = newer
        if bound is None and job.state == JobState.PENDING and job.wait_round > o.round_id:
            bound = job.wait_round
        if bound is None and job.state != JobState.PENDING:
            bound = next((pk for pk, at in counting if at is not None and at > job.updated_at), None)
        last = bisect_left(ids, bound) if bound is not None else len(ids)
        first = bisect_left(ids, o.round_id)
        if o.won or last <= first:
            until[o.pk], rounds[o.pk] = o.round_id, 1
        else:
            until[o.pk], rounds[o.pk] = ids[last - 1], last - first
        newer = o.round_id
    return until, rounds


@dataclass(frozen=True)
class QueuePlace:
    gpu_type: str
    limit: int
    position: int  # 1 = first in the market order for this type
    gpus_ahead: int


_QUEUE_SQL = """
SELECT COUNT(*), COALESCE(SUM(j.gpus), 0)
FROM market_job j, jsonb_array_elements(j.limits) e
WHERE j.state = %s AND e->>'gpu_type' = %s AND j.id <> %s
  AND ((e->>'limit')::bigint > %s
       OR ((e->>'limit')::bigint = %s AND (j.submitted_at, j.id) < (%s, %s)))
"""


def queue_places(job: Job) -> list[QueuePlace]:
    """For a pending job, per type it bids for: how many pending bids for that type come before it in the
    market order (price per GPU-hour descending, then submit time, then id) and their GPUs."""
    if job.state != JobState.PENDING:
        return []
    out = []
    for entry in job.limits:
        name, limit = entry["gpu_type"], int(entry["limit"])
        ahead, gpus = queue_ahead(gpu_type=name, limit=limit, submitted_at=job.submitted_at, job_id=job.pk)
        out.append(QueuePlace(gpu_type=name, limit=limit, position=ahead + 1, gpus_ahead=gpus))
    return out


def queue_ahead(*, gpu_type: str, limit: int, submitted_at: datetime, job_id: int = 0) -> tuple[int, int]:
    """Pending bids for `gpu_type` before one at `limit` submitted at `submitted_at` in the market order,
    and their GPUs. `job_id` 0: a job not submitted yet (every tie submitted earlier is ahead of it)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_QUEUE_SQL, [JobState.PENDING, gpu_type, job_id, limit, limit, submitted_at, job_id])
            ahead, gpus = cur.fetchone()
        return int(ahead), int(gpus)
    ahead = gpus = 0  # SQLite (local runs): the same rule in Python
    for other in Job.objects.filter(state=JobState.PENDING).exclude(pk=job_id):
        mine = {e["gpu_type"]: int(e["limit"]) for e in other.limits}.get(gpu_type)
        if mine is not None and (
            mine > limit or (mine == limit and (other.submitted_at, other.pk) < (submitted_at, job_id))
        ):
            ahead, gpus = ahead + 1, gpus + other.gpus
    return ahead, gpus


def _duration(seconds: float) -> str:
    if seconds < 90:
        whole = round(seconds)
        return f"{whole} second{'s' if whole != 1 else ''}"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{minutes / 60:.1f} hours"


def preemption_why(lease: Lease, *, admin: bool = False) -> str:
    """What a round preempted `lease` for, as a clause ("to restore another team's guaranteed H100 GPUs"),
    within the tenant wall (market.selectors.preemptions); empty when no reason was recorded."""
    p = preemption_of(lease, admin=admin)
    if p is None:
        return ""
    if p.for_own_tenant:
        team = "your team"
    elif p.for_tenant is not None:  # a platform admin
        team = f"team {p.for_tenant}"
    else:
        team = "another team"
    job = f" (job {p.for_job})" if p.for_job is not None else ""
    t = lease.gpu_type.name
    if p.reason == PreemptReason.RECLAIM_GUARANTEE:
        return f"to restore {team}'s guaranteed {t} GPUs{job}"
    if p.reason == PreemptReason.MOVED:
        return f"to move it: moved for a gang of {team}{job}"
    if p.reason == PreemptReason.BACKFILL_OVERRAN:
        gang = f"job {p.for_job}" if p.for_job is not None else f"a gang of {team}"
        return f"because it started on a node reserved for {gang}, ran past its predicted end, and the gang is due"
    return f"to bring {team} up to its fair share of {t} GPUs{job}"


def lost_work_clause(lease: Lease) -> str:
    """ ", losing 12 GPU-minutes of work since its last checkpoint": what the preemption threw away, as the
    round commit recorded it (market.selectors.lost_work); empty where it was not recorded."""
    if lease.lost_gpu_s is None or lease.running_at is None:  # not recorded, or its job never started
        return ""
    if lease.lost_gpu_s < 0.5:
        return ", losing no work"
    since = "its last checkpoint" if lease.last_checkpoint_at else "it started (it reported no checkpoint)"
    return f", losing {gpu_time(lease.lost_gpu_s)} of work since {since}"


def preemption_sentence(lease: Lease, *, admin: bool = False) -> str:
    """One plain sentence for a lease a round preempted, while it stops and after: the round, the rule and
    whom it made room for (`preemption_why`). Empty when no reason was recorded (or not preempted)."""
    why = preemption_why(lease, admin=admin)
    if lease.end_reason != EndReason.PREEMPTED or not why:
        return ""
    when = f"in round {lease.preempted_round_id} " if lease.preempted_round_id else ""
    if lease.ended_at is None and lease.preempt_reason == PreemptReason.MOVED:
        return (
            f"Being preempted {when}{why}{lost_work_clause(lease)}: the job is sent SIGTERM and has "
            f"{lease.grace_seconds} seconds to save a checkpoint before SIGKILL, then starts again on its new "
            "GPUs from its checkpoint directory."
        )
    if lease.ended_at is None:
        return (
            f"Being preempted {when}{why}{lost_work_clause(lease)}: the job is sent SIGTERM and has {lease.grace_seconds} seconds to "
            "save a checkpoint before SIGKILL, then goes back to the queue."
        )
    return f"Preempted {when}{why}{lost_work_clause(lease)}."


def lease_end_sentence(
    lease: Lease, *, gpu_seconds: float, exit_code: int | None, admin: bool = False, exit_reason: str = ""
) -> str:
    """Why a lease ended, in one plain sentence for the job's owner, with what it was charged.

    `gpu_seconds` and `exit_code` are what the node agents measured (market.selectors.usage); the idle
    thresholds are the policy's current ones. Empty while the lease has not ended, except for a lease being
    preempted (why, and the grace it has). `admin`: a platform admin, who may learn whom a preemption was for."""
    if lease.end_reason == EndReason.PREEMPTED and lease.ended_at is None:
        return preemption_sentence(lease, admin=admin)
    if not lease.end_reason or lease.ended_at is None:
        return ""
    ran = _duration((lease.ended_at - (lease.running_at or lease.started_at)).total_seconds())
    charged = (
        f"charged {_c(lease.charged)} credits for {gpu_time(gpu_seconds)} measured"
        if lease.charged is not None
        else "not charged yet"
    )
    reason = lease.end_reason
    if reason == EndReason.COMPLETED:
        return f"Completed: the job exited normally after {ran}; {charged}."
    if reason == EndReason.FAILED and exit_reason == "out of memory":
        return (
            f"Failed: out of memory: the kernel killed the job at its memory limit after {ran} (ask for more "
            f"with memory_gb_per_gpu); {charged}."
        )
    gang = (lease.end_detail or "").startswith("part ") and " on node " in lease.end_detail
    if reason == EndReason.FAILED and gang:
        return f"Failed: {lease.end_detail} after {ran}, and the gang's other parts were stopped; {charged}."
    if reason == EndReason.FAILED:
        code = f"with exit code {exit_code}" if exit_code is not None else "with an error"
        return f"Failed: the job exited {code} after {ran}; {charged}."
    if reason == EndReason.NODE_LOST and lease.end_detail:
        unbilled = " (not charged: the gang never ran together)" if lease.charged == 0 else ""
        return (
            f"Ended after {ran}: {lease.end_detail}, so the gang's other parts were stopped; {charged}"
            f"{unbilled}, and the job went back to the queue for the next round."
        )
    if reason == EndReason.PREEMPTED:
        why = preemption_why(lease, admin=admin)
        if not why:  # preempted before reasons were recorded: the round's rule is not known
            why = "because another team's guarantee or fair share needed these GPUs"
        when = f"in round {lease.preempted_round_id} " if lease.preempted_round_id else ""
        return (
            f"Preempted {when}after {ran} {why} (a {TIER_WORDS.get(lease.tier, lease.tier)} lease may be taken "
            f"back){lost_work_clause(lease)}; {charged}, and the job went back to the queue: it resumes from its checkpoint, if it saved "
            "one, when it wins a round again."
        )
    if reason == EndReason.EXPIRED:
        return f"Stopped at the job's maximum runtime ({_duration(lease.max_seconds)}); {charged}."
    if reason == EndReason.HOLD_SPENT:
        return (
            f"Stopped at its hold after {ran}: your team sizes holds by prediction and chose to stop a job that "
            f"outlives its hold ({_duration(lease.hold_seconds or lease.max_seconds)} of runtime) rather than "
            f"extend it; {charged}."
        )
    if reason == EndReason.CANCELLED:
        return f"Stopped because the job was cancelled, after {ran}; {charged}."
    if reason == EndReason.NODE_LOST:
        return (
            f"Node {lease.node.name} stopped answering after {ran}, so the lease was ended; {charged} "
            "(only what the node reported), and the job went back to the queue for the next round."
        )
    if reason == EndReason.IDLE:
        policy = market_policy()
        return (
            f"Released as idle after {ran}: its GPUs stayed below {policy.idle_util_pct}% utilisation for "
            f"{_duration(policy.idle_seconds)} (the market's idle policy); {charged}. Resubmit the job to run it again."
        )
    return f"Ended ({lease.get_end_reason_display()}) after {ran}; {charged}."
