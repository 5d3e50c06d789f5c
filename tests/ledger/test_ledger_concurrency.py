"""Concurrency on PostgreSQL: real threads, each with its own connection and transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from market.models import Hold, JournalEntry
from market.selectors.ledger import ledger_problems, tenant_balance
from market.services.ledger import InsufficientFunds, ledger_hold, ledger_settle, ledger_topup
from tests.conftest import World
from tests.ledger.factories import fund, hold

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16


def run_together(work: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    """Run work(i) in n threads released at once; returns each result or the exception it raised."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - reported to the test through results
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return results


def test_concurrent_holds_never_overdraw(world: World) -> None:
    fund(world.alpha, 55)
    results = run_together(lambda i: ledger_hold(tenant=world.alpha, amount=10, key=f"h{i}"))
    won = [r for r in results if isinstance(r, JournalEntry)]
    refused = [r for r in results if isinstance(r, InsufficientFunds)]
    assert len(won) + len(refused) == THREADS, results
    assert len(won) == 5
    balance = tenant_balance(tenant=world.alpha)
    assert (balance.available, balance.held) == (5, 50)
    assert Hold.objects.count() == 5
    assert ledger_problems() == []


def test_concurrent_holds_of_mixed_sizes_hold_exactly_what_succeeded(world: World) -> None:
    fund(world.alpha, 100)
    amounts = [3, 17, 8, 25, 11, 6, 30, 9, 14, 2, 21, 7, 19, 5, 12, 27]
    results = run_together(lambda i: ledger_hold(tenant=world.alpha, amount=amounts[i], key=f"h{i}"))
    assert all(isinstance(r, JournalEntry | InsufficientFunds) for r in results), results
    held = sum(a for a, r in zip(amounts, results, strict=True) if isinstance(r, JournalEntry))
    assert 0 < held <= 100
    balance = tenant_balance(tenant=world.alpha)
    assert (balance.available, balance.held) == (100 - held, held)
    assert ledger_problems() == []


def test_concurrent_same_key_topups_make_one_entry(world: World) -> None:
    results = run_together(
        lambda i: ledger_topup(tenant=world.alpha, amount=42, key="same", actor=world.admin)
    )
    assert all(isinstance(r, JournalEntry) for r in results), results
    assert len({r.pk for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    assert JournalEntry.objects.count() == 1
    assert tenant_balance(tenant=world.alpha).available == 42
    assert ledger_problems() == []


def test_concurrent_same_key_settles_settle_once(world: World) -> None:
    fund(world.alpha, 100)
    h = hold(world.alpha, 60, key="h")
    results = run_together(lambda i: ledger_settle(hold_key=h.key, charge=25, key="s"))
    assert all(isinstance(r, JournalEntry) for r in results), results
    assert len({r.pk for r in results}) == 1
    balance = tenant_balance(tenant=world.alpha)
    assert (balance.available, balance.held, balance.spent) == (75, 0, 25)
    assert ledger_problems() == []
