"""The bank test (issue 19): for a fixed time, concurrent clients submit jobs (retrying with the same key and
body, and with the same key and another body), amend and cancel them, an admin tops up and refunds with
repeated keys, rounds clear back to back and leases start, stop (reports repeated) and settle, each on its own
PostgreSQL connection. Afterwards every invariant of the money must hold:

- every entry sums to zero, cached balances equal their postings, held equals the open holds (ledger_check),
  and all accounts together sum to zero;
- no tenant balance is negative (the platform's top-up account is minus all money ever added);
- each tenant's available + held + spent (net charges) equals its top-ups;
- every hold is what its round decided for its frozen book;
- no hold is closed twice, no lease settled twice, no job has two live leases, and every accepted job exists.

Managers make and revoke tokens and spend alerts meanwhile (the mix that deadlocked at COMMIT, issue 38): no
request is answered 500, and PostgreSQL detects no deadlock during the storm.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from allocator import clear
from market.models import (
    LIVE_LEASE_STATES,
    Account,
    EntryKind,
    Hold,
    HoldState,
    Job,
    JobState,
    JournalEntry,
    Lease,
    Round,
    RoundState,
)
from market.selectors.book import Snapshot
from market.selectors.ledger import ledger_problems, tenant_balance
from market.services import ledger, rounds
from market.services.leases import lease_running, lease_stopped
from tests.conftest import World
from tests.round_holds import decided_holds

pytestmark = pytest.mark.django_db(transaction=True)

SECONDS = 8.0


def _job_body(rng: random.Random) -> dict[str, Any]:
    return {
        "name": "bank",
        "command": "python train.py",
        "gpus": rng.choice([1, 1, 2, 4]),
        "max_hours": rng.choice(["0.25", "1"]),
        "bids": [{"gpu_type": "H100", "limit": f"{rng.uniform(2, 6):.2f}"}],
    }


class Bank:
    def __init__(self, world: World) -> None:
        self.world = world
        self.deadline = time.monotonic() + SECONDS
        self.lock = threading.Lock()
        self.accepted: set[int] = set()
        self.statuses: dict[int, int] = {}
        self.errors: list[str] = []

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def loop(self, name: str, step: Any) -> threading.Thread:
        def run() -> None:
            rng = random.Random(name)
            try:
                while self.running():
                    step(rng)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(f"{name}: {exc!r}")
            finally:
                connection.close()

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread

    def client_step(self, user: Any, slug: str) -> Any:
        client = self.world.client(user)
        keys: list[tuple[str, dict[str, Any]]] = []

        def step(rng: random.Random) -> None:
            roll = rng.random()
            base = f"/api/v1/tenants/{slug}/jobs"
            if roll < 0.5 or not keys:
                if keys and rng.random() < 0.3:
                    key, body = rng.choice(keys)
                    body = body if rng.random() < 0.5 else _job_body(rng)  # same key, same or other body
                else:
                    key, body = f"k{rng.random()}", _job_body(rng)
                    keys.append((key, body))
                resp = client.post(base, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
                if resp.status_code == 201:
                    with self.lock:
                        self.accepted.add(resp.json()["id"])
            else:
                jobs = list(Job.objects.filter(tenant__slug=slug).values_list("pk", flat=True)[:50])
                job = rng.choice(jobs) if jobs else 0
                if roll < 0.75:
                    bid = {"bids": [{"gpu_type": "H100", "limit": f"{rng.uniform(2, 7):.2f}"}]}
                    resp = client.post(f"{base}/{job}/bid", bid, format="json")
                else:
                    resp = client.post(f"{base}/{job}/cancel")
            self.answered(resp)

        return step

    def answered(self, resp: Any) -> None:
        """No 500 from the database: a conflict the net could not absorb is a 503 that says so (issue 38)."""
        with self.lock:
            self.statuses[resp.status_code] = self.statuses.get(resp.status_code, 0) + 1
        assert resp.status_code < 500 or (
            resp.status_code == 503 and resp.json()["error"] == "database_conflict"
        ), resp.content[:300]

    def manager_step(self, user: Any, slug: str, kind: str) -> Any:
        """The mix that deadlocked at COMMIT (issue 38): a manager makes and revokes tokens (their user row
        locked, a token of the tenant inserted) while the same manager, in another session, makes and deletes
        spend alerts (the tenant's row locked, a rule by them inserted), and their members submit."""
        client = self.world.client(user)
        url = f"/api/v1/tenants/{slug}/{kind}"
        body = {"name": "storm"} if kind == "tokens" else {"kind": "spend_day", "threshold": "1000000"}

        def step(rng: random.Random) -> None:
            made = client.post(url, body, format="json")
            self.answered(made)
            if made.status_code == 201:
                self.answered(client.delete(f"{url}/{made.json()['id']}"))

        return step

    def money_step(self, rng: random.Random) -> None:
        w = self.world
        tenant = rng.choice([w.alpha, w.beta, w.gamma])
        key = f"m{rng.randrange(40)}"  # keys repeat: replays, and conflicts when the amount differs
        amount = rng.choice([1, 2, 5]) * 1_000_000
        call = ledger.ledger_topup if rng.random() < 0.6 else ledger.ledger_refund
        # Conflicts and refunds beyond the charges are refused, and write nothing.
        with contextlib.suppress(ledger.LedgerError):
            call(tenant=tenant, amount=amount, key=f"{call.__name__}-{key}", actor=w.admin)
        time.sleep(0.01)

    def round_step(self, rng: random.Random) -> None:
        slot = timezone.now().replace(microsecond=0) + timedelta(days=rng.randrange(1, 10**6))
        rnd, created = Round.objects.get_or_create(slot=slot, defaults={"period_s": 300})
        if created:
            rounds.round_advance(round_id=rnd.pk)

    def lease_step(self, rng: random.Random) -> None:
        live = list(Lease.objects.filter(state__in=LIVE_LEASE_STATES).values_list("pk", "state")[:30])
        if not live:
            time.sleep(0.05)
            return
        lease_id, state = rng.choice(live)
        if state == "allocated" and rng.random() < 0.5:
            lease_running(lease_id=lease_id)
        else:
            for _ in range(rng.choice([1, 2])):  # a repeated stop report
                lease_stopped(lease_id=lease_id, now=timezone.now() + timedelta(minutes=rng.randrange(60)))


def _deadlocks() -> int:
    """Deadlocks PostgreSQL detected in this database so far (every backend's counts flushed first)."""
    time.sleep(1.5)  # a backend publishes its counts at most once a second, and when it exits
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def test_the_bank_balances_after_a_storm(world: World) -> None:
    w = world
    w.nodes(w.h100, 2, size=8)
    for tenant in (w.alpha, w.beta, w.gamma):
        w.fund(tenant, 60)
    deadlocks = _deadlocks()
    bank = Bank(w)
    threads = [
        bank.loop("amy", bank.client_step(w.amy, "alpha")),
        bank.loop("bob", bank.client_step(w.bob, "beta")),
        bank.loop("cara", bank.client_step(w.cara, "gamma")),
        bank.loop("alice", bank.client_step(w.alice, "alpha")),
        bank.loop("alice-tokens", bank.manager_step(w.alice, "alpha", "tokens")),
        bank.loop("alice-alerts", bank.manager_step(w.alice, "alpha", "spend-alerts")),
        bank.loop("bob-tokens", bank.manager_step(w.bob, "beta", "tokens")),
        bank.loop("bob-alerts", bank.manager_step(w.bob, "beta", "spend-alerts")),
        bank.loop("money", bank.money_step),
        bank.loop("rounds", bank.round_step),
        bank.loop("leases-1", bank.lease_step),
        bank.loop("leases-2", bank.lease_step),
    ]
    for t in threads:
        t.join(120)
    assert not bank.errors, bank.errors
    # The lock rules (docs/rounds.md §Lock order) leave no cycle for this mix: PostgreSQL saw no deadlock.
    assert _deadlocks() == deadlocks, f"deadlocks during the storm; answers: {bank.statuses}"
    assert bank.statuses.get(201, 0) > 10 and Round.objects.filter(state=RoundState.DISPATCHED).count() > 2
    assert Lease.objects.filter(state="ended").exists(), "no lease settled: the storm tried too little"

    assert ledger_problems() == []
    assert Account.objects.aggregate(total=Sum("balance"))["total"] == 0
    assert not Account.objects.filter(tenant__isnull=False, balance__lt=0).exists()
    for tenant in (w.alpha, w.beta, w.gamma):
        balance = tenant_balance(tenant=tenant)
        topups = JournalEntry.objects.filter(tenant=tenant, kind=EntryKind.TOPUP).aggregate(s=Sum("amount"))[
            "s"
        ]
        assert balance.available + balance.held + balance.spent == topups
    for rnd in Round.objects.filter(state=RoundState.DISPATCHED).exclude(book=b""):
        # One hold per tenant and round: at most what the clearing decided for the tenant's winners (a winner
        # skipped at commit is not held), and exactly the sum of the shares its leases record.
        decided = decided_holds(rnd.pk, clear(Snapshot.load(rnd.book).book))
        holds = Hold.objects.filter(key__startswith=f"round:{rnd.pk}:")
        assert all(h.amount <= decided[h.key] for h in holds)
        assert holds.count() == len({h.key for h in holds})
    for hold in Hold.objects.filter(key__contains=":tenant:"):
        leases = Lease.objects.filter(hold_key=hold.key)
        extended = JournalEntry.objects.filter(hold=hold, kind=EntryKind.HOLD).exclude(key=hold.key)
        assert sum(lease.hold_share or 0 for lease in leases) == hold.amount
        assert (extended.aggregate(s=Sum("amount"))["s"] or 0) == hold.amount - hold.entries.get(
            key=hold.key
        ).amount
        assert leases.count() == hold.parts
        ended = [lease for lease in leases if lease.state == "ended"]
        assert hold.parts_closed == len(ended) and hold.closed == sum(
            lease.hold_share or 0 for lease in ended
        )
        assert hold.charged == sum(lease.charged or 0 for lease in ended)
        assert (hold.state == HoldState.SETTLED) == (len(ended) == leases.count())
    # Every settled or released lease closed its share once: one closing entry per lease.
    closing = JournalEntry.objects.filter(kind__in=[EntryKind.SETTLE, EntryKind.RELEASE])
    assert not closing.values("key").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert closing.count() == Lease.objects.filter(state="ended").count()
    assert (
        not Lease.objects.filter(state__in=LIVE_LEASE_STATES)
        .values("job")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    )
    assert Job.objects.filter(pk__in=bank.accepted).count() == len(bank.accepted)
    assert not Job.objects.filter(state=JobState.ALLOCATED, leases__isnull=True).exists()
