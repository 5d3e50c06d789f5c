"""Many holds in one go, for the round commit (ARCHITECTURE.md §Money; docs/ledger.md).

The same effect as calling `ledger_hold` once per winner, with the same keys, accounts and postings, but in a
fixed number of statements: a round that places thousands of jobs must not cost a query per job. Callers run
it inside their own transaction (the round commit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from market.models import Account, AccountKind, EntryKind, Hold, JournalEntry, Posting
from market.services.ledger import KeyConflict, _check_amount, _check_key


@dataclass(frozen=True)
class HoldRequest:
    tenant_id: int
    amount: int
    key: str
    memo: str = ""


@dataclass(frozen=True)
class HoldsPlaced:
    """Keys held now, keys held by an earlier call (replays), and keys refused for lack of money."""

    placed: list[str]
    replayed: list[str]
    refused: list[str]


def ledger_hold_many(requests: Sequence[HoldRequest]) -> HoldsPlaced:
    """Hold each request's amount (available -> held), in order; a request that no longer fits its tenant's
    available balance is refused, the ones after it may still fit. Keys already used with the same tenant
    and amount are replays; with different figures, KeyConflict."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("ledger_hold_many must run inside the caller's transaction")
    for r in requests:
        _check_amount(r.amount, allow_zero=True)
        _check_key(r.key)
    existing = {
        key: (tenant_id, amount)
        for key, tenant_id, amount in JournalEntry.objects.filter(
            key__in=[r.key for r in requests]
        ).values_list("key", "tenant_id", "amount")
    }
    replayed = []
    fresh: list[HoldRequest] = []
    for r in requests:
        if r.key in existing:
            if existing[r.key] != (r.tenant_id, r.amount):
                raise KeyConflict(f"key {r.key!r} was already used for a different hold")
            replayed.append(r.key)
        else:
            fresh.append(r)
    tenants = sorted({r.tenant_id for r in fresh})
    accounts = _accounts(tenants)
    # Lock every available account first, in tenant order, as the single-call services do: no deadlock.
    available = dict(
        Account.objects.select_for_update()
        .filter(pk__in=[accounts[t, AccountKind.AVAILABLE] for t in tenants])
        .order_by("tenant_id")
        .values_list("tenant_id", "balance")
    )
    placed: list[HoldRequest] = []
    refused: list[str] = []
    total: dict[int, int] = defaultdict(int)
    for r in fresh:
        if total[r.tenant_id] + r.amount <= available[r.tenant_id]:
            total[r.tenant_id] += r.amount
            placed.append(r)
        else:
            refused.append(r.key)
    holds = Hold.objects.bulk_create(Hold(key=r.key, tenant_id=r.tenant_id, amount=r.amount) for r in placed)
    entries = JournalEntry.objects.bulk_create(
        JournalEntry(
            key=r.key, kind=EntryKind.HOLD, tenant_id=r.tenant_id, amount=r.amount, hold=h, memo=r.memo
        )
        for r, h in zip(placed, holds, strict=True)
    )
    postings = []
    for r, entry in zip(placed, entries, strict=True):
        if r.amount:
            postings.append(
                Posting(
                    entry=entry, account_id=accounts[r.tenant_id, AccountKind.AVAILABLE], amount=-r.amount
                )
            )
            postings.append(
                Posting(entry=entry, account_id=accounts[r.tenant_id, AccountKind.HELD], amount=r.amount)
            )
    Posting.objects.bulk_create(postings, batch_size=5000)
    for tenant_id in tenants:
        if total[tenant_id]:
            moved = Account.objects.filter(
                pk=accounts[tenant_id, AccountKind.AVAILABLE], balance__gte=total[tenant_id]
            ).update(balance=F("balance") - total[tenant_id])
            if moved != 1:  # impossible while the row is locked; the CHECK constraint is the backstop
                raise AssertionError(f"available balance of tenant {tenant_id} changed under its lock")
            Account.objects.filter(pk=accounts[tenant_id, AccountKind.HELD]).update(
                balance=F("balance") + total[tenant_id]
            )
    return HoldsPlaced(placed=[r.key for r in placed], replayed=replayed, refused=refused)


def _accounts(tenants: list[int]) -> dict[tuple[int, str], int]:
    """Account ids of each tenant's available and held accounts, creating missing ones."""
    found = {
        (tenant_id, kind): pk
        for pk, tenant_id, kind in Account.objects.filter(
            tenant_id__in=tenants, kind__in=[AccountKind.AVAILABLE, AccountKind.HELD]
        ).values_list("pk", "tenant_id", "kind")
    }
    for tenant_id in tenants:
        for kind in (AccountKind.AVAILABLE, AccountKind.HELD):
            if (tenant_id, kind) not in found:
                found[tenant_id, kind] = Account.objects.get_or_create(tenant_id=tenant_id, kind=kind)[0].pk
    return found
