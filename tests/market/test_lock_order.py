"""One lock order for leases and money (docs/rounds.md §Lock order), checked on PostgreSQL with real
connections: a round commit that re-tiers a lease meets lease_stopped settling that same lease.

lease_stopped is paused once it holds its locks; the round commit is started and left to run until it waits
on a lock; then lease_stopped goes on. With the old order (the commit took the tenant's accounts and then
the lease; lease_stopped the lease and then the accounts) PostgreSQL killed one of them as a deadlock. Both
must now finish, and the ledger must check.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from market.models import Hold, JobState, Lease, LeaseState, Round, RoundState
from market.selectors.ledger import ledger_problems
from market.services import leases as lease_services
from market.services import rounds
from market.services.guarantees import guarantee_set
from market.services.ledger import ledger_settle
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_waits_on_lock(pids: set[int]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = 'Lock'",
            [list(pids)],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0]) > 0


def test_commit_retiering_a_lease_and_its_settlement_do_not_deadlock(world, monkeypatch):
    w = world
    w.nodes(w.h100, 1, size=8)
    w.fund(w.alpha, 1000)
    # Round 1: alpha, without a guarantee, wins a borrowed/spot lease.
    first = make_job(w.alpha, w.alice, gpus=2, limits={w.h100: 5})
    slot = rounds.slot_of(timezone.now(), 300)
    done = rounds.round_advance(round_id=Round.objects.create(slot=slot, period_s=300).pk)
    assert done.state == RoundState.DISPATCHED
    lease = Lease.objects.get(job=first)
    assert lease.tier != "G"
    # Now alpha has a guarantee: the next round re-tiers that lease to G, and alpha wins again (its accounts
    # are locked by the commit).
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    second = make_job(w.alpha, w.alice, gpus=2, limits={w.h100: 5}, name="second")
    rnd = Round.objects.create(slot=slot + timedelta(seconds=300), period_s=300)
    assert rounds.round_advance(round_id=rnd.pk, stop_after=RoundState.CLEARED).state == RoundState.CLEARED
    rnd.refresh_from_db()

    locked, go = threading.Event(), threading.Event()
    real_settle = ledger_settle  # what market.services.leases calls, patched there below
    pids: dict[str, int] = {}
    outcome: dict[str, object] = {}

    def paused_settle(**kwargs):
        locked.set()
        assert go.wait(20)
        return real_settle(**kwargs)

    monkeypatch.setattr(lease_services, "ledger_settle", paused_settle)

    def in_thread(name: str, work) -> threading.Thread:
        def run() -> None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pids[name] = cursor.fetchone()[0]
                outcome[name] = work()
            except Exception as exc:  # noqa: BLE001 - reported below
                outcome[name] = exc
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    stopper = in_thread("stop", lambda: lease_services.lease_stopped(lease_id=lease.pk))
    assert locked.wait(20), "lease_stopped never reached its settlement"
    committer = in_thread("commit", lambda: rounds.round_advance(round_id=rnd.pk))
    deadline = time.monotonic() + 20
    while not ("commit" in pids and _backend_waits_on_lock({pids["commit"]})):
        assert committer.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.05)
    go.set()
    stopper.join(30)
    committer.join(30)

    assert not isinstance(outcome["stop"], Exception), outcome["stop"]
    assert not isinstance(outcome["commit"], Exception), outcome["commit"]
    finished = outcome["commit"]
    assert isinstance(finished, Round)
    assert finished.state == RoundState.DISPATCHED, finished.error
    lease.refresh_from_db()
    assert lease.state == LeaseState.ENDED
    second.refresh_from_db()
    assert second.state == JobState.ALLOCATED
    assert Hold.objects.get(key=lease.hold_key).state == "settled"
    assert ledger_problems() == []
