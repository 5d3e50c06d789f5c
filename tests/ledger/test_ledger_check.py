"""`manage.py ledger_check` on a healthy ledger and on tampered ones."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connection
from django.db.models import F

from market.models import Account, AccountKind, Hold, Posting
from market.services.ledger import ledger_refund
from tests.conftest import World
from tests.ledger.factories import admin_user, fund, hold, settle

pytestmark = pytest.mark.django_db


def check() -> tuple[bool, str]:
    out = StringIO()
    try:
        call_command("ledger_check", stdout=out)
    except CommandError:
        return False, out.getvalue()
    return True, out.getvalue()


@pytest.fixture
def busy(world: World) -> World:
    fund(world.alpha, 100, key="t-alpha")
    settle(hold(world.alpha, 60, key="h1"), 20, key="s1")
    hold(world.alpha, 30, key="h2")
    fund(world.beta, 50, key="t-beta")
    ledger_refund(tenant=world.alpha, amount=5, key="r1", actor=admin_user())
    return world


def test_empty_ledger_is_ok(world: World) -> None:
    assert check() == (True, "ledger ok: 0 entries, 0 accounts\n")


def test_healthy_ledger_is_ok(busy: World) -> None:
    # alpha available+held, beta available, platform revenue+topup
    assert check() == (True, "ledger ok: 6 entries, 5 accounts\n")


def test_tampered_posting_names_entry_and_account(busy: World) -> None:
    posting = Posting.objects.get(entry__key="s1", account__kind=AccountKind.REVENUE)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE market_posting SET amount = amount + 7 WHERE id = %s", [posting.pk])
    ok, out = check()
    assert not ok
    assert f"entry {posting.entry_id} (key 's1'): postings sum to 7, not 0" in out
    revenue = Account.objects.get(kind=AccountKind.REVENUE)
    assert f"account {revenue.pk} (platform:revenue): cached balance 15, postings sum to 22" in out


def test_tampered_cached_balance_is_named(busy: World) -> None:
    Account.objects.filter(tenant=busy.beta, kind=AccountKind.AVAILABLE).update(balance=F("balance") + 1)
    ok, out = check()
    assert not ok
    assert "(beta:available): cached balance 51, postings sum to 50" in out


def test_held_account_must_match_open_holds(busy: World) -> None:
    Hold.objects.filter(key="h2").update(amount=31)
    ok, out = check()
    assert not ok
    assert "(alpha:held): cached balance 30, open holds total 31" in out


def test_negative_tenant_account_is_named(busy: World) -> None:
    # The CHECK constraint stops a negative cached balance, so forge negative postings instead.
    posting = Posting.objects.get(entry__key__endswith=":t-beta", account__tenant=busy.beta)
    Posting.objects.filter(pk=posting.pk).update(amount=-50)
    ok, out = check()
    assert not ok
    assert "(beta:available): negative (cached 50, postings -50)" in out


def test_command_line_exit_status(busy: World, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        Posting.objects.filter(entry__key__endswith=":t-alpha", amount__gt=0).update(amount=F("amount") * 2)
        ManagementUtility(["manage.py", "ledger_check"]).execute()
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert f"key 'client:{busy.alpha.pk}:t-alpha'" in captured.out
    assert "ledger check failed" in captured.err
