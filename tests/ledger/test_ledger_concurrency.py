"""Concurrency on PostgreSQL: real threads, each with its own connection and transaction."""

from __future__ import annotations

import pytest

from market.models import Hold, JournalEntry
from market.selectors.ledger import ledger_problems, tenant_balance
from market.services.ledger import InsufficientFunds, ledger_settle, ledger_topup
from market.services.ledger_bulk import ledger_hold
from tests.concurrency import THREADS, run_together
from tests.conftest import World
from tests.ledger.factories import fund, hold

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_concurrent_settlements_of_one_shared_hold_each_close_their_share(world: World) -> None:
    """A round's hold shared by a tenant's winners (issue 36): each lease's settlement, all at once, closes
    only its share under the hold's row lock; the last one settles the hold, and nothing is charged twice."""
    from django.db import transaction

    from market.models import HoldState
    from market.services.ledger_bulk import Share, ledger_hold_shares

    fund(world.alpha, 10_000)
    shares = [100 + 10 * i for i in range(THREADS)]
    with transaction.atomic():
        ledger_hold_shares(
            shares=[Share(world.alpha.pk, amount, i) for i, amount in enumerate(shares)],
            key_of=lambda t: f"round:1:tenant:{t}",
            memo="round 1",
        )
    key = f"round:1:tenant:{world.alpha.pk}"
    results = run_together(
        lambda i: ledger_settle(hold_key=key, charge=i, key=f"lease:{i}:settle", share=shares[i])
    )
    assert all(isinstance(r, JournalEntry) for r in results), results
    shared = Hold.objects.get(key=key)
    charged = sum(range(THREADS))
    assert (shared.state, shared.closed, shared.charged) == (HoldState.SETTLED, sum(shares), charged)
    balance = tenant_balance(tenant=world.alpha)
    assert (balance.available, balance.held, balance.spent) == (10_000 - charged, 0, charged)
    assert ledger_problems() == []
