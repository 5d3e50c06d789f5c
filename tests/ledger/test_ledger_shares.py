"""A round's holds, one per tenant shared by its winners (issue 36 §3; docs/ledger.md §Holds): each share is
held in winner order while the sum fits, each settles alone, and the hold closes with its last share."""

from __future__ import annotations

import pytest
from django.db import transaction

from market.models import EntryKind, Hold, HoldState, JournalEntry
from market.selectors.ledger import Balance, ledger_problems, tenant_balance
from market.services.ledger import HoldClosed, ledger_hold_extend, ledger_release, ledger_settle
from market.services.ledger_bulk import Share, SharesHeld, ledger_hold_shares
from tests.conftest import World
from tests.ledger.factories import fund

pytestmark = pytest.mark.django_db


def shares(*requested: Share, round_id: int = 1) -> SharesHeld:
    with transaction.atomic():
        return ledger_hold_shares(
            shares=requested, key_of=lambda t: f"round:{round_id}:tenant:{t}", memo=f"round {round_id}"
        )


def test_one_hold_per_tenant_for_the_shares_that_fit(world: World) -> None:
    fund(world.alpha, 100)
    fund(world.beta, 10)
    a, b = world.alpha.pk, world.beta.pk
    held = shares(Share(a, 50, 1), Share(a, 40, 2), Share(a, 30, 3), Share(a, 10, 4), Share(b, 11, 5))
    assert (held.placed, held.refused, held.conflicted) == ([1, 2, 4], [3, 5], [])
    hold = Hold.objects.get(key=f"round:1:tenant:{a}")
    assert (hold.amount, hold.parts, hold.parts_closed, hold.closed) == (100, 3, 0, 0)
    assert JournalEntry.objects.get(key=hold.key).postings.count() == 2
    assert not Hold.objects.filter(key=f"round:1:tenant:{b}").exists()  # nothing held for beta
    assert tenant_balance(tenant=world.alpha) == Balance(0, 100, 0)
    assert ledger_problems() == []


def test_each_share_settles_alone_and_the_last_closes_the_hold(world: World) -> None:
    fund(world.alpha, 1_000)
    shares(Share(world.alpha.pk, 300, 1), Share(world.alpha.pk, 200, 2), Share(world.alpha.pk, 0, 3))
    key = f"round:1:tenant:{world.alpha.pk}"
    # The first share: 120 of its 300 charged, 180 back; the hold stays open for the others.
    first = ledger_settle(hold_key=key, charge=120, key="lease:1:settle", share=300, lease_id=None)
    assert tenant_balance(tenant=world.alpha) == Balance(680, 200, 120)
    hold = Hold.objects.get(key=key)
    assert (hold.state, hold.closed, hold.charged, hold.parts_closed) == (HoldState.OPEN, 300, 120, 1)
    assert ledger_problems() == []
    # A repeated settlement of the same share changes nothing.
    again = ledger_settle(hold_key=key, charge=120, key="lease:1:settle", share=300)
    assert again.pk == first.pk and again.replayed
    # The second share is extended first (its lease ran long), then charged beyond: capped at the share.
    ledger_hold_extend(hold_key=key, amount=50, key="lease:2:extend:1")
    ledger_settle(hold_key=key, charge=999, key="lease:2:settle", share=250)
    assert tenant_balance(tenant=world.alpha) == Balance(630, 0, 370)
    assert Hold.objects.get(key=key).state == HoldState.OPEN  # the zero share is still open
    ledger_release(hold_key=key, key="lease:3:settle", share=0)
    hold.refresh_from_db()
    assert (hold.state, hold.closed, hold.charged, hold.parts_closed) == (HoldState.SETTLED, 550, 370, 3)
    with pytest.raises(HoldClosed):
        ledger_release(hold_key=key, key="lease:4:settle", share=0)
    assert ledger_problems() == []
    assert JournalEntry.objects.filter(hold=hold, kind=EntryKind.SETTLE).count() == 2


def test_a_repeated_round_holds_once(world: World) -> None:
    """A resumed commit asking for the same tenant's hold again replays it; different figures conflict."""
    fund(world.alpha, 1_000)
    a = world.alpha.pk
    shares(Share(a, 300, 1), Share(a, 200, 2))
    again = shares(Share(a, 300, 1), Share(a, 200, 2))
    assert (again.placed, again.refused, again.conflicted) == ([1, 2], [], [])
    other = shares(Share(a, 100, 1))
    assert (other.placed, other.conflicted) == ([], [1])
    assert tenant_balance(tenant=world.alpha) == Balance(500, 500, 0)
    assert Hold.objects.count() == 1 and ledger_problems() == []


def test_ledger_check_finds_a_held_account_that_differs_from_the_shares_still_held(world: World) -> None:
    fund(world.alpha, 1_000)
    shares(Share(world.alpha.pk, 300, 1), Share(world.alpha.pk, 200, 2))
    key = f"round:1:tenant:{world.alpha.pk}"
    ledger_settle(hold_key=key, charge=100, key="lease:1:settle", share=300)
    assert ledger_problems() == []  # 200 held: the open share
    Hold.objects.filter(key=key).update(amount=600)  # as if the hold had grown without its postings
    [problem] = ledger_problems()
    assert "held): cached balance 200, open holds total 300" in problem.what
