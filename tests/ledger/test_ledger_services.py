"""Ledger services one by one: what each moves, what it refuses, and what a repeated key does."""

from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from market.models import Hold, HoldState, JournalEntry, Posting
from market.selectors.ledger import Balance, ledger_entries, ledger_problems, tenant_balance, tenant_holds
from market.services.ledger import (
    HoldClosed,
    InsufficientFunds,
    InvalidAmount,
    InvalidKey,
    KeyConflict,
    NotPermitted,
    RefundExceedsCharges,
    UnknownHold,
    ledger_refund,
    ledger_release,
    ledger_settle,
    ledger_topup,
)
from market.services.ledger_bulk import ledger_hold
from tests.conftest import World
from tests.ledger.factories import fund, hold, settle

pytestmark = pytest.mark.django_db


def test_new_tenant_has_zero_balance(world: World) -> None:
    assert tenant_balance(tenant=world.alpha) == Balance(available=0, held=0, spent=0)


def test_topup_credits_available_and_is_audited(world: World) -> None:
    entry = ledger_topup(tenant=world.alpha, amount=5_000_000, key="t1", actor=world.admin, memo="grant")
    assert tenant_balance(tenant=world.alpha) == Balance(5_000_000, 0, 0)
    assert sorted(entry.postings.values_list("account__kind", "amount")) == [
        ("available", 5_000_000),
        ("topup", -5_000_000),
    ]
    event = AuditEvent.objects.get(action="ledger.topup")
    assert (event.actor, event.tenant, event.detail["amount"]) == (world.admin, world.alpha, 5_000_000)


def test_topup_and_refund_need_an_admin(world: World) -> None:
    with pytest.raises(NotPermitted):
        ledger_topup(tenant=world.alpha, amount=1, key="t1", actor=world.alice)
    with pytest.raises(NotPermitted):
        ledger_refund(tenant=world.alpha, amount=1, key="r1", actor=world.alice)
    assert not JournalEntry.objects.exists()


@pytest.mark.parametrize("amount", [0, -1, 10**16, True, 1.5, "5", None])
def test_topup_refuses_bad_amounts(world: World, amount: object) -> None:
    with pytest.raises(InvalidAmount):
        ledger_topup(tenant=world.alpha, amount=amount, key="t1", actor=world.admin)  # type: ignore[arg-type]  # wrong types on purpose: the service must refuse them
    assert not JournalEntry.objects.exists()


@pytest.mark.parametrize("key", ["", "   ", "k" * 201, None])
def test_bad_keys_are_refused(world: World, key: object) -> None:
    with pytest.raises(InvalidKey):
        ledger_topup(tenant=world.alpha, amount=1, key=key, actor=world.admin)  # type: ignore[arg-type]  # wrong types on purpose: the service must refuse them


def test_same_key_same_arguments_replays(world: World) -> None:
    first = ledger_topup(tenant=world.alpha, amount=7, key="t1", actor=world.admin)
    again = ledger_topup(tenant=world.alpha, amount=7, key="t1", actor=world.admin)
    assert (again.pk, again.replayed, first.replayed) == (first.pk, True, False)
    assert tenant_balance(tenant=world.alpha).available == 7
    assert AuditEvent.objects.filter(action="ledger.topup").count() == 1


@pytest.mark.parametrize("change", [{"amount": 8}, {"memo": "other"}], ids=["amount", "memo"])
def test_same_key_different_arguments_conflicts(world: World, change: dict[str, object]) -> None:
    ledger_topup(tenant=world.alpha, amount=7, key="t1", actor=world.admin)
    args: dict[str, object] = {"tenant": world.alpha, "amount": 7, "key": "t1", "actor": world.admin}
    args.update(change)
    with pytest.raises(KeyConflict):
        ledger_topup(**args)  # type: ignore[arg-type]  # wrong types on purpose: the service must refuse them
    assert JournalEntry.objects.count() == 1


def test_client_keys_are_scoped_to_their_tenant(world: World) -> None:
    a = ledger_topup(tenant=world.alpha, amount=7, key="t1", actor=world.admin)
    b = ledger_topup(tenant=world.beta, amount=8, key="t1", actor=world.admin)
    assert a.pk != b.pk and not b.replayed
    assert (tenant_balance(tenant=world.alpha).available, tenant_balance(tenant=world.beta).available) == (
        7,
        8,
    )


def test_client_keys_never_meet_system_keys(world: World) -> None:
    """An admin's top-up keyed like a round's hold or a lease's settlement blocks neither (issue 19 §3)."""
    fund(world.alpha, 100, key="round:1:job:1")
    fund(world.alpha, 50, key="lease:1:settle")
    held = ledger_hold(tenant=world.alpha, amount=50, key="round:1:job:1")
    assert not held.replayed and held.hold is not None
    settled = ledger_settle(hold_key="round:1:job:1", charge=10, key="lease:1:settle")
    assert not settled.replayed and settled.hold is not None and settled.hold.charged == 10
    assert tenant_balance(tenant=world.alpha) == Balance(140, 0, 10)


def test_a_system_key_cannot_enter_the_client_namespace(world: World) -> None:
    fund(world.alpha, 100, key="k")
    with pytest.raises(InvalidKey):
        ledger_hold(tenant=world.alpha, amount=10, key=f"client:{world.alpha.pk}:k")
    assert not Hold.objects.exists()


def test_hold_moves_available_to_held(world: World) -> None:
    fund(world.alpha, 100)
    entry = ledger_hold(tenant=world.alpha, amount=60, key="round1:job1", memo="job 1")
    assert tenant_balance(tenant=world.alpha) == Balance(40, 60, 0)
    assert entry.hold is not None and entry.hold.key == "round1:job1"
    assert list(tenant_holds(tenant=world.alpha, state=HoldState.OPEN)) == [entry.hold]


def test_hold_beyond_available_is_refused_and_writes_nothing(world: World) -> None:
    fund(world.alpha, 100)
    hold(world.alpha, 60)
    with pytest.raises(InsufficientFunds):
        ledger_hold(tenant=world.alpha, amount=41, key="h2")
    assert tenant_balance(tenant=world.alpha) == Balance(40, 60, 0)
    assert not JournalEntry.objects.filter(key="h2").exists()
    assert not Hold.objects.filter(key="h2").exists()


def test_settle_charges_and_releases_the_rest_in_one_entry(world: World) -> None:
    fund(world.alpha, 100)
    h = hold(world.alpha, 60)
    entry = ledger_settle(hold_key=h.key, charge=25, key="lease1")
    assert tenant_balance(tenant=world.alpha) == Balance(75, 0, 25)
    assert sorted(entry.postings.values_list("account__kind", "amount")) == [
        ("available", 35),
        ("held", -60),
        ("revenue", 25),
    ]
    assert h.hold is not None
    h.hold.refresh_from_db()
    assert (h.hold.state, h.hold.charged) == (HoldState.SETTLED, 25)


def test_settle_charges_at_most_the_hold(world: World) -> None:
    fund(world.alpha, 100)
    h = hold(world.alpha, 60)
    entry = settle(h, 1_000)
    assert entry.amount == 1_000  # what was asked, so a retry with the same figure replays
    assert tenant_balance(tenant=world.alpha) == Balance(40, 0, 60)
    assert ledger_settle(hold_key=h.key, charge=1_000, key=entry.key).pk == entry.pk


def test_release_returns_everything(world: World) -> None:
    fund(world.alpha, 100)
    h = hold(world.alpha, 60)
    entry = ledger_release(hold_key=h.key, key="rel1")
    assert entry.kind == "release"
    assert tenant_balance(tenant=world.alpha) == Balance(100, 0, 0)


def test_a_hold_closes_once(world: World) -> None:
    fund(world.alpha, 100)
    h = hold(world.alpha, 60)
    settle(h, 10, key="s1")
    with pytest.raises(HoldClosed):
        ledger_release(hold_key=h.key, key="s2")
    with pytest.raises(KeyConflict):
        ledger_settle(hold_key=h.key, charge=11, key="s1")
    assert ledger_settle(hold_key=h.key, charge=10, key="s1").replayed
    assert tenant_balance(tenant=world.alpha) == Balance(90, 0, 10)


def test_unknown_hold(world: World) -> None:
    with pytest.raises(UnknownHold):
        ledger_settle(hold_key="nope", charge=0, key="s1")
    with pytest.raises(InvalidAmount):
        ledger_settle(hold_key="nope", charge=-1, key="s1")


def test_refund_is_bounded_by_net_charges(world: World) -> None:
    fund(world.alpha, 100)
    settle(hold(world.alpha, 60), 30)
    fund(world.beta, 100)
    settle(hold(world.beta, 50), 50)  # beta's charges do not count for alpha
    ledger_refund(tenant=world.alpha, amount=20, key="r1", actor=world.admin)
    with pytest.raises(RefundExceedsCharges):
        ledger_refund(tenant=world.alpha, amount=11, key="r2", actor=world.admin)
    ledger_refund(tenant=world.alpha, amount=10, key="r3", actor=world.admin)
    assert tenant_balance(tenant=world.alpha) == Balance(100, 0, 0)
    assert AuditEvent.objects.filter(action="ledger.refund").count() == 2
    assert ledger_problems() == []


def test_every_entry_balances(world: World) -> None:
    fund(world.alpha, 100)
    settle(hold(world.alpha, 60), 30)
    ledger_refund(tenant=world.alpha, amount=5, key="r1", actor=world.admin)
    for entry in JournalEntry.objects.all():
        assert sum(Posting.objects.filter(entry=entry).values_list("amount", flat=True)) == 0
    assert ledger_problems() == []


def test_ledger_entries_filters(world: World) -> None:
    fund(world.alpha, 100)
    hold(world.alpha, 10)
    fund(world.beta, 5)
    assert [e.kind for e in ledger_entries(tenant=world.alpha)] == ["hold", "topup"]
    assert [e.kind for e in ledger_entries(tenant=world.alpha, kind="topup")] == ["topup"]
