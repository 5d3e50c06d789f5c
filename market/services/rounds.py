"""Auction rounds as a resumable state machine (ARCHITECTURE.md §Rounds and workers).

OPEN -> FROZEN -> CLEARED -> COMMITTED -> DISPATCHED, each step in its own transaction under the round's row
lock, so that:

- two workers racing for one round produce one commit: the second finds the row locked and leaves, or finds
  the step done and moves to the next;
- a worker killed at any point leaves the round in its last committed state, and the next tick finishes it:
  the frozen book is stored, so the clearing is repeated on exactly the same input and must give the same
  result hash (checked before commit);
- a late or repeated tick finds the period's round (its `slot` is unique) done and does nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.audit import audit
from allocator import BookError, Result, clear
from config.dbretry import conflict_of
from config.logs import bind
from inventory.models import GpuType
from market.models import DONE_STATES, Round, RoundState
from market.selectors.book import Snapshot, book_snapshot
from market.selectors.policy import current_fence, market_policy
from market.selectors.rounds import round_summary
from market.services.fair_share import fair_share_record
from market.services.holds import leases_hold_check
from market.services.leases import leases_expire
from market.services.round_commit import busy_evidence, commit_result
from market.services.shadow import shadow_rounds_run

log = logging.getLogger(__name__)

# A step that fails this many times (a transient fault that does not go away) ends the round as FAILED, so
# that one bad round cannot hold up every later one.
MAX_ATTEMPTS = 3


class DigestMismatch(RuntimeError):
    """Clearing the stored book again gave a different result: never commit it."""


@dataclass
class _Memo:
    """What this process already computed for the round, so a run that does every step clears once."""

    snapshot: Snapshot | None = None
    result: Result | None = None
    committed: bool = False  # this process ran the commit step (shadow rounds follow it, §Shadow rounds)


def slot_of(now: datetime, period_s: int) -> datetime:
    """The start of the period containing `now` (periods are aligned to the epoch)."""
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % period_s, tz=UTC)


def round_tick(*, now: datetime | None = None) -> Round | None:
    """What the beat runs: expire overdue leases, extend or stop leases whose sized holds run out, finish any
    unfinished round, then run this period's round unless it exists. Returns this period's round (None when a
    later one already exists)."""
    now = now or timezone.now()
    policy = market_policy()
    leases_expire(fence=current_fence(), now=now)
    leases_hold_check(fence=current_fence(), now=now)
    for round_id in (
        Round.objects.exclude(state__in=DONE_STATES).order_by("slot").values_list("pk", flat=True)
    ):
        round_advance(round_id=round_id)
    slot = slot_of(now, policy.round_seconds)
    latest = Round.objects.order_by("-slot").first()
    if latest is not None and latest.slot >= slot:
        return latest if latest.slot == slot else None
    rnd, _ = Round.objects.get_or_create(slot=slot, defaults={"period_s": policy.round_seconds})
    return round_advance(round_id=rnd.pk)


def round_advance(*, round_id: int, stop_after: RoundState | None = None) -> Round:
    """Take the round through its remaining steps; `stop_after` ends early (for tests of interruption)."""
    with bind(round_id=round_id):
        memo = _Memo()
        rnd = _advance(round_id, stop_after, memo)
        # After the live round is committed and dispatched, never before: a shadow cannot delay or fail it.
        if memo.committed and rnd.state == RoundState.DISPATCHED and memo.snapshot and memo.result:
            shadow_rounds_run(rnd=rnd, book=memo.snapshot.book, result=memo.result)
        return rnd


def _advance(round_id: int, stop_after: RoundState | None, memo: _Memo) -> Round:
    while True:
        try:
            with transaction.atomic():
                rnd = (
                    Round.objects.select_for_update(no_key=True, skip_locked=True).filter(pk=round_id).first()
                )
                if rnd is None:  # another worker holds it: it will finish the step
                    return Round.objects.get(pk=round_id)
                if rnd.state in DONE_STATES or rnd.state == stop_after:
                    return rnd
                _step(rnd, memo)
        except (BookError, DigestMismatch) as exc:
            # Deterministic: repeating the step gives the same failure.
            return _failed(round_id, exc, final=True)
        except Exception as exc:
            if conflict_of(exc):  # a deadlock is no fault of the round's: not an attempt; the net repeats it
                raise
            log.exception("round %s: step failed", round_id)
            rnd = _failed(round_id, exc, final=False)
            if rnd.state == RoundState.FAILED:
                return rnd
            raise


def _step(rnd: Round, memo: _Memo) -> None:
    """One step, logged with its time: one line per round step (docs/deploy.md, What to watch)."""
    step, started = _STEPS[RoundState(rnd.state)], time.perf_counter()
    step(rnd, memo)
    log.info(
        "round %s: %s -> %s",
        rnd.pk,
        step.__name__.lstrip("_"),
        rnd.state,
        extra={
            "step": step.__name__.lstrip("_"),
            "state": str(rnd.state),
            "ms": round((time.perf_counter() - started) * 1000, 1),
        },
    )


def _failed(round_id: int, exc: Exception, *, final: bool) -> Round:
    with transaction.atomic():
        rnd = Round.objects.select_for_update(no_key=True).get(pk=round_id)
        rnd.attempts = F("attempts") + 1
        rnd.error = f"{type(exc).__name__}: {exc}"[:2000]
        rnd.save(update_fields=["attempts", "error"])
        rnd.refresh_from_db()
        if final or rnd.attempts >= MAX_ATTEMPTS:
            rnd.state = RoundState.FAILED
            rnd.save(update_fields=["state"])
            audit(actor=None, tenant=None, action="round.failed", detail=round_summary(rnd))
            log.error("round %s failed: %s", round_id, rnd.error, extra={"attempts": rnd.attempts})
    return rnd


def _freeze(rnd: Round, memo: _Memo) -> None:
    """Snapshot the book through selectors and store it (step: OPEN -> FROZEN)."""
    now, started = timezone.now(), time.perf_counter()
    if not GpuType.objects.exists():
        rnd.state, rnd.error = RoundState.DISPATCHED, "no GPU types: nothing to clear"
        rnd.frozen_at = rnd.cleared_at = rnd.committed_at = rnd.dispatched_at = now
        rnd.save()
        return
    snapshot = book_snapshot(round_id=rnd.pk, now=now, policy=market_policy())
    memo.snapshot = snapshot
    rnd.book = snapshot.dump()
    rnd.bids = len(snapshot.book.bids)
    rnd.gpus_free = int(snapshot.book.nodes.free_count.sum())
    rnd.state, rnd.frozen_at = RoundState.FROZEN, now
    rnd.freeze_ms = round((time.perf_counter() - started) * 1000)
    rnd.save(update_fields=["book", "bids", "gpus_free", "state", "frozen_at", "freeze_ms"])


def _snapshot(rnd: Round, memo: _Memo) -> Snapshot:
    if memo.snapshot is None:
        memo.snapshot = Snapshot.load(rnd.book)
    return memo.snapshot


def _clear(rnd: Round, memo: _Memo) -> None:
    """Run the allocator on the frozen book (FROZEN -> CLEARED); only the hash and counts are stored."""
    snapshot = _snapshot(rnd, memo)
    started = time.perf_counter()
    result = clear(snapshot.book)
    rnd.clear_ms = round((time.perf_counter() - started) * 1000)
    memo.result = result
    rnd.digest = result.digest
    rnd.losers = len(result.losers)
    rnd.preemptions = len(result.preemptions)
    rnd.counters = dict(result.counters)
    rnd.state, rnd.cleared_at = RoundState.CLEARED, timezone.now()
    rnd.save(update_fields=["digest", "losers", "preemptions", "counters", "clear_ms", "state", "cleared_at"])


def _commit(rnd: Round, memo: _Memo) -> None:
    """Write leases, holds, outbox commands, outcomes and prices in this one transaction (CLEARED -> COMMITTED)."""
    snapshot = _snapshot(rnd, memo)
    result = memo.result if memo.result is not None else clear(snapshot.book)
    if result.digest != rnd.digest:
        raise DigestMismatch(f"cleared again to {result.digest}, stored {rnd.digest}")
    memo.result = result
    started = time.perf_counter()
    now = timezone.now()
    stats = commit_result(rnd=rnd, snapshot=snapshot, result=result, now=now)
    # The fair-share history, in this same transaction: a round that commits leaves it, one that fails does not.
    fair_share_record(rnd=rnd, book=snapshot.book, result=result)
    rnd.winners, rnd.skipped = stats.winners, stats.skipped
    rnd.preemptions, rnd.gpus_allocated = stats.preemptions, stats.gpus_allocated
    rnd.losers = len(result.losers) + stats.skipped
    rnd.counters = {
        **rnd.counters,
        **{f"skipped_{k}": v for k, v in stats.skipped_reasons.items()},
        **busy_evidence(snapshot.book, result),
        # What market.selectors.market_stats charts per round: GPUs the book's bids asked for (an unchanged
        # loss writes no outcome row to sum them from), and the outcome rows this round wrote.
        "demand_gpus": int(snapshot.book.bids.gpus.sum()),
        "outcomes_written": stats.outcomes,
    }
    rnd.state, rnd.committed_at = RoundState.COMMITTED, now
    rnd.commit_ms = round((time.perf_counter() - started) * 1000)
    prices = {
        name: {
            "posted": int(result.posted[k]),
            "spot": int(result.spot_price[k]) if result.spot_price[k] >= 0 else None,
        }
        for k, name in enumerate(result.type_names)
    }
    audit(actor=None, tenant=None, action="round.commit", detail=round_summary(rnd, prices=prices))
    rnd.save(
        update_fields=[
            "winners",
            "skipped",
            "preemptions",
            "gpus_allocated",
            "losers",
            "counters",
            "state",
            "committed_at",
            "commit_ms",
        ]
    )
    memo.committed = True


def _dispatch(rnd: Round, memo: _Memo) -> None:
    """Hand the round's commands to the agents (COMMITTED -> DISPATCHED). Agents poll the outbox for pending
    commands, so the hand-off is the commit itself; this step records that the round is complete."""
    rnd.state, rnd.dispatched_at = RoundState.DISPATCHED, timezone.now()
    rnd.save(update_fields=["state", "dispatched_at"])


_STEPS = {
    RoundState.OPEN: _freeze,
    RoundState.FROZEN: _clear,
    RoundState.CLEARED: _commit,
    RoundState.COMMITTED: _dispatch,
}
