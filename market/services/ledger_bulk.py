"""The ledger's one hold path (ARCHITECTURE.md §Money; docs/ledger.md §Holds).

`ledger_hold_many` places many holds in a fixed number of statements, for the round commit: a round that places
thousands of jobs must not cost a query per job. Callers run it inside their own transaction. `ledger_hold`,
one hold with the single-call services' contract (an entry back, KeyConflict, InsufficientFunds), is a batch
of one, so that the tests of single holds exercise the code production runs (issue 26 §4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Tenant
from config.money import format_credits
from market import bulk
from market.models import Account, AccountKind, EntryKind, Hold, HoldState, JournalEntry, Posting
from market.services.ledger import (
    InsufficientFunds,
    KeyConflict,
    _check_amount,
    _check_system_key,
    _fingerprint,
    _replay,
    _Request,
)


@dataclass(frozen=True)
class HoldRequest:
    tenant_id: int
    amount: int
    key: str
    memo: str = ""


@dataclass(frozen=True)
class HoldsPlaced:
    """Keys held now, keys held by an earlier call (replays), keys refused for lack of money, and keys already
    used for a different hold (conflicts)."""

    placed: list[str]
    replayed: list[str]
    refused: list[str]
    conflicted: list[str]


def _request(r: HoldRequest) -> _Request:
    """What a hold's key stands for, as the single-call services fingerprint it (ledger._fingerprint)."""
    return _Request(EntryKind.HOLD, r.tenant_id, r.amount, r.key, r.memo)


@transaction.atomic
def ledger_hold(*, tenant: Tenant, amount: int, key: str, memo: str = "") -> JournalEntry:
    """Reserve money (available -> held); refused with InsufficientFunds rather than overdrawing.

    The hold's key is also its entry's key; settle and release name the hold by it. A key used before returns
    the first entry, marked `replayed`, when it asked for the same; otherwise KeyConflict.
    """
    request = HoldRequest(tenant_id=tenant.pk, amount=amount, key=key, memo=memo)
    try:
        # A savepoint: of two concurrent calls with one key, the second passes the key check before the
        # first commits, then fails on the unique index once it gets the account lock; it re-reads the
        # winner instead (as ledger._keyed does).
        with transaction.atomic():
            held = ledger_hold_many([request])
    except IntegrityError:
        found = _replay(request.key, _request(request))
        if found is None:
            raise
        return found
    if held.refused:
        have = Account.objects.get(tenant=tenant, kind=AccountKind.AVAILABLE).balance
        raise InsufficientFunds(
            f"{AccountKind.AVAILABLE.value} balance {format_credits(have)} is less than "
            f"{format_credits(amount)} credits"
        )
    if held.placed:
        return JournalEntry.objects.select_related("hold").get(key=key)
    # A replay or a conflict: _replay returns the first entry or raises KeyConflict with the single-call
    # services' message.
    found = _replay(request.key, _request(request))
    if found is None:  # impossible: the key was found a moment ago under this transaction
        raise KeyConflict(f"key {key!r} vanished")
    return found


def ledger_hold_many(requests: Sequence[HoldRequest]) -> HoldsPlaced:
    """Hold each request's amount (available -> held), in order; a request that no longer fits its tenant's
    available balance is refused, the ones after it may still fit. Keys already used with the same tenant
    and amount are replays; with different figures, conflicts: that request alone is left out, so one bad
    key cannot fail a whole round."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("ledger_hold_many must run inside the caller's transaction")
    for r in requests:
        _check_amount(r.amount, allow_zero=True)
        _check_system_key(r.key)
    # A key is a replay only when its entry asked for exactly this (the single-call services' fingerprint:
    # kind, tenant, amount, hold and memo), so a grant or an extension under the key is a conflict, not a hold.
    existing = {
        entry.key: _fingerprint(entry)
        for entry in JournalEntry.objects.select_related("hold").filter(
            key__in=bulk.any_of([r.key for r in requests], "text")
        )
    }
    replayed: list[str] = []
    conflicted: list[str] = []
    fresh: list[HoldRequest] = []
    for r in requests:
        if r.key in existing:
            (replayed if existing[r.key] == _request(r) else conflicted).append(r.key)
        else:
            fresh.append(r)
    tenants = sorted({r.tenant_id for r in fresh})
    accounts = _accounts(tenants)
    # Lock every available account first, in tenant order, as the single-call services do: no deadlock.
    available = dict(
        Account.objects.select_for_update(no_key=True)
        .filter(pk__in=bulk.any_of([accounts[t, AccountKind.AVAILABLE] for t in tenants]))
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
    now = timezone.now()
    hold_ids = bulk.insert(
        Hold,
        {
            "key": [r.key for r in placed],
            "tenant_id": [r.tenant_id for r in placed],
            "amount": [r.amount for r in placed],
            "state": [HoldState.OPEN] * len(placed),
            "charged": [0] * len(placed),
            "created_at": [now] * len(placed),
        },
    )
    entry_ids = bulk.insert(
        JournalEntry,
        {
            "key": [r.key for r in placed],
            "kind": [EntryKind.HOLD] * len(placed),
            "tenant_id": [r.tenant_id for r in placed],
            "amount": [r.amount for r in placed],
            "hold_id": hold_ids,
            "memo": [r.memo for r in placed],
            "created_at": [now] * len(placed),
        },
    )
    legs: dict[str, list[int]] = {"entry_id": [], "account_id": [], "amount": []}
    for r, entry_id in zip(placed, entry_ids, strict=True):
        if r.amount:
            for kind, amount in ((AccountKind.AVAILABLE, -r.amount), (AccountKind.HELD, r.amount)):
                legs["entry_id"].append(entry_id)
                legs["account_id"].append(accounts[r.tenant_id, kind])
                legs["amount"].append(amount)
    bulk.insert(Posting, legs, ids=False)
    _move(accounts, {t: total[t] for t in tenants if total[t]})
    return HoldsPlaced(
        placed=[r.key for r in placed], replayed=replayed, refused=refused, conflicted=conflicted
    )


@dataclass(frozen=True)
class Share:
    """One winner's part of its tenant's round hold: `ref` names it back to the caller (a job id)."""

    tenant_id: int
    amount: int
    ref: int


@dataclass(frozen=True)
class SharesHeld:
    """Refs whose share is held (in a new hold or a replayed one), refused for lack of money, or left out
    because their tenant's key was used for a different hold."""

    placed: list[int]
    refused: list[int]
    conflicted: list[int]


def ledger_hold_shares(*, shares: Sequence[Share], key_of: Callable[[int], str], memo: str) -> SharesHeld:
    """One hold per tenant for its shares that fit (docs/ledger.md §Holds: the round's holds): the shares are
    admitted in order while their sum fits the tenant's available balance (as ledger_hold_many admits holds,
    so the same winners are held), then each tenant gets one hold of `parts` = its admitted shares, under
    `key_of(tenant id)`, with one entry and two postings. A tenant whose key exists: a replay when that entry
    asked for all of its shares' sum (all placed), else a conflict (all left out)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("ledger_hold_shares must run inside the caller's transaction")
    for sh in shares:
        _check_amount(sh.amount, allow_zero=True)
    by_tenant: dict[int, list[Share]] = defaultdict(list)
    for sh in shares:
        by_tenant[sh.tenant_id].append(sh)
    keys = {t: _check_system_key(key_of(t)) for t in by_tenant}
    existing = {
        entry.key: _fingerprint(entry)
        for entry in JournalEntry.objects.select_related("hold").filter(
            key__in=bulk.any_of(list(keys.values()), "text")
        )
    }
    placed: list[int] = []
    refused: list[int] = []
    conflicted: list[int] = []
    fresh: dict[int, list[Share]] = {}
    for t, mine in by_tenant.items():
        if keys[t] not in existing:
            fresh[t] = mine
            continue
        asked = _Request(EntryKind.HOLD, t, sum(sh.amount for sh in mine), keys[t], memo)
        (placed if existing[keys[t]] == asked else conflicted).extend(sh.ref for sh in mine)
    tenants = sorted(fresh)
    accounts = _accounts(tenants)
    # Lock every available account first, in tenant order, as the single-call services do: no deadlock.
    available = dict(
        Account.objects.select_for_update(no_key=True)
        .filter(pk__in=bulk.any_of([accounts[t, AccountKind.AVAILABLE] for t in tenants]))
        .order_by("tenant_id")
        .values_list("tenant_id", "balance")
    )
    total: dict[int, int] = defaultdict(int)
    count: dict[int, int] = defaultdict(int)
    for t in tenants:
        for sh in fresh[t]:
            if total[t] + sh.amount <= available[t]:
                total[t] += sh.amount
                count[t] += 1
                placed.append(sh.ref)
            else:
                refused.append(sh.ref)
    held = [t for t in tenants if count[t]]
    now = timezone.now()
    hold_ids = bulk.insert(
        Hold,
        {
            "key": [keys[t] for t in held],
            "tenant_id": held,
            "amount": [total[t] for t in held],
            "state": [HoldState.OPEN] * len(held),
            "charged": [0] * len(held),
            "closed": [0] * len(held),
            "parts": [count[t] for t in held],
            "parts_closed": [0] * len(held),
            "created_at": [now] * len(held),
        },
    )
    entry_ids = bulk.insert(
        JournalEntry,
        {
            "key": [keys[t] for t in held],
            "kind": [EntryKind.HOLD] * len(held),
            "tenant_id": held,
            "amount": [total[t] for t in held],
            "hold_id": hold_ids,
            "memo": [memo] * len(held),
            "created_at": [now] * len(held),
        },
    )
    legs: dict[str, list[int]] = {"entry_id": [], "account_id": [], "amount": []}
    for t, entry_id in zip(held, entry_ids, strict=True):
        if total[t]:
            for kind, amount in ((AccountKind.AVAILABLE, -total[t]), (AccountKind.HELD, total[t])):
                legs["entry_id"].append(entry_id)
                legs["account_id"].append(accounts[t, kind])
                legs["amount"].append(amount)
    bulk.insert(Posting, legs, ids=False)
    _move(accounts, {t: total[t] for t in held if total[t]})
    return SharesHeld(placed=placed, refused=refused, conflicted=conflicted)


def _accounts(tenants: list[int]) -> dict[tuple[int, str], int]:
    """Account ids of each tenant's available and held accounts, creating missing ones."""
    found = {
        (tenant_id, kind): pk
        for pk, tenant_id, kind in Account.objects.filter(
            tenant_id__in=bulk.any_of(tenants), kind__in=[AccountKind.AVAILABLE, AccountKind.HELD]
        ).values_list("pk", "tenant_id", "kind")
    }
    for tenant_id in tenants:
        for kind in (AccountKind.AVAILABLE, AccountKind.HELD):
            if (tenant_id, kind) not in found:
                found[tenant_id, kind] = Account.objects.get_or_create(tenant_id=tenant_id, kind=kind)[0].pk
    return found


def _move(accounts: dict[tuple[int, str], int], total: dict[int, int]) -> None:
    """available -= total, held += total, per tenant; one statement per account kind on PostgreSQL."""
    if not total:
        return
    for kind, sign in ((AccountKind.AVAILABLE, -1), (AccountKind.HELD, 1)):
        ids = [accounts[t, kind] for t in total]
        amounts = [sign * amount for amount in total.values()]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {Account._meta.db_table} AS a SET balance = a.balance + v.delta "
                    "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::bigint[]) AS delta) AS v "
                    "WHERE a.id = v.id AND a.balance + v.delta >= 0",
                    [ids, amounts],
                )
                moved = cursor.rowcount
        else:
            moved = sum(
                Account.objects.filter(pk=pk, balance__gte=-delta).update(balance=F("balance") + delta)
                for pk, delta in zip(ids, amounts, strict=True)
            )
        if moved != len(ids):  # impossible under the row locks; the CHECK constraint backs it up
            raise AssertionError(f"{kind} balances changed under their locks")
