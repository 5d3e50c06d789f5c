"""Shared ledger helpers: fund a tenant, open and settle holds, with unique keys unless one is given."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accounts.models import Tenant, User
    from market.models import JournalEntry

_seq = itertools.count(1)


def next_key(prefix: str) -> str:
    return f"{prefix}-{next(_seq)}"


def admin_user() -> User:
    from accounts.models import User

    return User.objects.get_or_create(username="ledger-admin", defaults={"is_staff": True})[0]


def fund(tenant: Tenant, amount: int, *, key: str | None = None, actor: User | None = None) -> JournalEntry:
    from market.services.ledger import ledger_topup

    return ledger_topup(
        tenant=tenant, amount=amount, key=key or next_key("topup"), actor=actor or admin_user(), memo="test"
    )


def hold(tenant: Tenant, amount: int, *, key: str | None = None) -> JournalEntry:
    from market.services.ledger_bulk import ledger_hold

    return ledger_hold(tenant=tenant, amount=amount, key=key or next_key("hold"))


def settle(hold_entry: JournalEntry, charge: int, *, key: str | None = None) -> JournalEntry:
    from market.services.ledger import ledger_settle

    return ledger_settle(hold_key=hold_entry.key, charge=charge, key=key or next_key("settle"))
