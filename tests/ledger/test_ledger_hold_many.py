"""`ledger_hold_many`, the round commit's hold path, tested directly (issue 26 §4): until then only the round
tests reached it, and the single-hold tests ran a second implementation production never used."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from market.models import Hold, HoldState, JournalEntry
from market.selectors.ledger import Balance, ledger_problems, tenant_balance
from market.services.ledger import InvalidAmount, InvalidKey, KeyConflict, ledger_grant
from market.services.ledger_bulk import HoldRequest, HoldsPlaced, ledger_hold, ledger_hold_many
from tests.conftest import World
from tests.ledger.factories import fund

pytestmark = pytest.mark.django_db


def many(*requests: HoldRequest) -> HoldsPlaced:
    with transaction.atomic():
        return ledger_hold_many(requests)


def test_runs_on_postgresql() -> None:
    """The bulk path's balance update has a PostgreSQL branch; these tests are meant to exercise it."""
    assert connection.vendor == "postgresql"


def test_one_request(world: World) -> None:
    fund(world.alpha, 100)
    held = many(HoldRequest(world.alpha.pk, 60, "round:1:job:1", "round 1, job 1"))
    assert held == HoldsPlaced(placed=["round:1:job:1"], replayed=[], refused=[], conflicted=[])
    assert tenant_balance(tenant=world.alpha) == Balance(40, 60, 0)
    entry = JournalEntry.objects.select_related("hold").get(key="round:1:job:1")
    assert entry.memo == "round 1, job 1" and entry.amount == 60
    assert entry.hold is not None and (entry.hold.amount, entry.hold.state) == (60, HoldState.OPEN)
    assert ledger_problems() == []


def test_many_requests_in_order_refusing_only_what_no_longer_fits(world: World) -> None:
    fund(world.alpha, 100)
    held = many(
        HoldRequest(world.alpha.pk, 50, "a"),
        HoldRequest(world.alpha.pk, 40, "b"),
        HoldRequest(world.alpha.pk, 30, "c"),  # 90 held: 30 no longer fits
        HoldRequest(world.alpha.pk, 10, "d"),  # but 10 still does
        HoldRequest(world.alpha.pk, 0, "e"),  # a zero hold is placed, with no postings
    )
    assert held == HoldsPlaced(placed=["a", "b", "d", "e"], replayed=[], refused=["c"], conflicted=[])
    assert tenant_balance(tenant=world.alpha) == Balance(0, 100, 0)
    assert not JournalEntry.objects.filter(key="c").exists() and not Hold.objects.filter(key="c").exists()
    assert ledger_problems() == []


def test_insufficient_funds_writes_nothing(world: World) -> None:
    fund(world.alpha, 10)
    held = many(HoldRequest(world.alpha.pk, 11, "a"))
    assert held == HoldsPlaced(placed=[], replayed=[], refused=["a"], conflicted=[])
    assert tenant_balance(tenant=world.alpha) == Balance(10, 0, 0)
    assert not Hold.objects.exists()


def test_a_repeated_key_replays_and_a_changed_one_conflicts(world: World) -> None:
    fund(world.alpha, 100)
    many(HoldRequest(world.alpha.pk, 30, "a"), HoldRequest(world.alpha.pk, 30, "b"))
    held = many(
        HoldRequest(world.alpha.pk, 30, "a"),  # the same: a replay, nothing moves
        HoldRequest(world.alpha.pk, 31, "b"),  # another amount: a conflict, left out alone
        HoldRequest(world.beta.pk, 30, "a"),  # another tenant: a conflict too
        HoldRequest(world.alpha.pk, 30, "b", "other memo"),  # another memo: as the single-call services
        HoldRequest(world.alpha.pk, 5, "c"),  # and a fresh one beside them is placed
    )
    assert held == HoldsPlaced(placed=["c"], replayed=["a"], refused=[], conflicted=["b", "a", "b"])
    assert tenant_balance(tenant=world.alpha) == Balance(35, 65, 0)
    assert ledger_problems() == []


def test_a_key_used_by_another_kind_of_entry_conflicts(world: World) -> None:
    """A grant under a system key with the same tenant and amount is no hold: before issue 26 the bulk path
    compared tenant and amount only and called it a replay, so the round would have run a job with no hold."""
    ledger_grant(tenant=world.alpha, amount=50, key="round:9:job:9")
    held = many(HoldRequest(world.alpha.pk, 50, "round:9:job:9"))
    assert held.conflicted == ["round:9:job:9"] and held.replayed == []
    assert not Hold.objects.exists()


def test_two_tenants_are_held_apart(world: World) -> None:
    fund(world.alpha, 100)
    fund(world.beta, 20)
    held = many(
        HoldRequest(world.beta.pk, 15, "b1"),
        HoldRequest(world.alpha.pk, 70, "a1"),
        HoldRequest(world.beta.pk, 10, "b2"),  # beta has 5 left: refused, though alpha has plenty
        HoldRequest(world.alpha.pk, 30, "a2"),
    )
    assert held == HoldsPlaced(placed=["b1", "a1", "a2"], replayed=[], refused=["b2"], conflicted=[])
    assert tenant_balance(tenant=world.alpha) == Balance(0, 100, 0)
    assert tenant_balance(tenant=world.beta) == Balance(5, 15, 0)
    assert dict(Hold.objects.values_list("key", "tenant_id")) == {
        "b1": world.beta.pk,
        "a1": world.alpha.pk,
        "a2": world.alpha.pk,
    }
    assert ledger_problems() == []


def test_a_tenant_without_accounts_is_refused_not_failed(world: World) -> None:
    held = many(HoldRequest(world.alpha.pk, 1, "a"))
    assert held.refused == ["a"]


def test_bad_requests_are_refused_before_anything_is_written(world: World) -> None:
    fund(world.alpha, 100)
    with pytest.raises(InvalidAmount):
        many(HoldRequest(world.alpha.pk, 10, "a"), HoldRequest(world.alpha.pk, -1, "b"))
    with pytest.raises(InvalidKey):
        many(
            HoldRequest(world.alpha.pk, 10, "a"), HoldRequest(world.alpha.pk, 1, f"client:{world.alpha.pk}:x")
        )
    assert not Hold.objects.exists()


def test_ledger_hold_is_a_batch_of_one(world: World) -> None:
    """The single hold keeps its contract over the bulk path: an entry, a replay, KeyConflict."""
    fund(world.alpha, 100)
    entry = ledger_hold(tenant=world.alpha, amount=40, key="h", memo="m")
    assert not entry.replayed and entry.hold is not None and entry.hold.key == "h"
    again = ledger_hold(tenant=world.alpha, amount=40, key="h", memo="m")
    assert again.replayed and again.pk == entry.pk
    with pytest.raises(KeyConflict, match="already used for a different hold"):
        ledger_hold(tenant=world.alpha, amount=41, key="h", memo="m")
    assert tenant_balance(tenant=world.alpha) == Balance(60, 40, 0)
