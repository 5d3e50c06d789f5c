"""Ledger reads: balances, entries, holds, and the consistency check behind `manage.py ledger_check`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from accounts.models import Tenant
from market.models import Account, AccountKind, Hold, HoldState, JournalEntry, Posting


@dataclass(frozen=True)
class Balance:
    """A tenant's money in micro-credits; spent is net revenue charged to it (settlements minus refunds)."""

    available: int
    held: int
    spent: int


def tenant_balance(*, tenant: Tenant) -> Balance:
    cached = dict(Account.objects.filter(tenant=tenant).values_list("kind", "balance"))
    return Balance(
        available=cached.get(AccountKind.AVAILABLE, 0),
        held=cached.get(AccountKind.HELD, 0),
        spent=tenant_spent(tenant=tenant),
    )


def tenant_spent(*, tenant: Tenant) -> int:
    """Revenue postings of the tenant's entries: settle charges add, refunds subtract."""
    total = Posting.objects.filter(entry__tenant=tenant, account__kind=AccountKind.REVENUE).aggregate(
        total=Coalesce(Sum("amount"), 0)
    )["total"]
    return int(total)


def ledger_entries(
    *,
    tenant: Tenant,
    kind: str | None = None,
    since: datetime | None = None,
    before: datetime | None = None,
) -> QuerySet[JournalEntry]:
    """The tenant's entries, newest first, with postings; `since` is inclusive and `before` exclusive."""
    qs = JournalEntry.objects.filter(tenant=tenant)
    if kind:
        qs = qs.filter(kind=kind)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if before is not None:
        qs = qs.filter(created_at__lt=before)
    postings = Posting.objects.select_related("account__tenant")
    return qs.select_related("actor", "hold").prefetch_related(Prefetch("postings", queryset=postings))


def tenant_holds(*, tenant: Tenant, state: str | None = None) -> QuerySet[Hold]:
    qs = Hold.objects.filter(tenant=tenant)
    return qs.filter(state=state) if state else qs


@dataclass(frozen=True)
class Problem:
    """One inconsistency found by `ledger_problems`, worded for an operator."""

    what: str


def ledger_problems() -> list[Problem]:
    """Everything wrong with the ledger, each found by one aggregate query (GROUP BY ... HAVING)."""
    return [*_unbalanced_entries(), *_stale_balances(), *_negative_accounts(), *_held_mismatches()]


def ledger_size() -> tuple[int, int]:
    return JournalEntry.objects.count(), Account.objects.count()


def _posted() -> Coalesce:
    return Coalesce(Sum("postings__amount"), Value(0))


def _unbalanced_entries() -> list[Problem]:
    rows = (
        Posting.objects.values("entry_id", "entry__key")
        .annotate(total=Sum("amount"))
        .exclude(total=0)
        .order_by("entry_id")
    )
    return [
        Problem(f"entry {r['entry_id']} (key {r['entry__key']!r}): postings sum to {r['total']}, not 0")
        for r in rows
    ]


def _stale_balances() -> list[Problem]:
    rows = (
        Account.objects.select_related("tenant")
        .annotate(posted=_posted())
        .exclude(balance=F("posted"))
        .order_by("id")
    )
    return [
        Problem(f"account {a.pk} ({a.label}): cached balance {a.balance}, postings sum to {a.posted}")
        for a in rows
    ]


def _negative_accounts() -> list[Problem]:
    rows = (
        Account.objects.select_related("tenant")
        .filter(tenant__isnull=False)
        .annotate(posted=_posted())
        .filter(Q(balance__lt=0) | Q(posted__lt=0))
        .order_by("id")
    )
    return [
        Problem(f"account {a.pk} ({a.label}): negative (cached {a.balance}, postings {a.posted})")
        for a in rows
    ]


def _held_mismatches() -> list[Problem]:
    """A tenant's held account must carry exactly what its open holds still hold (a shared hold's shares
    settled so far are no longer held: amount - closed)."""
    open_holds = (
        Hold.objects.filter(tenant=OuterRef("tenant"), state=HoldState.OPEN)
        .values("tenant")
        .annotate(total=Sum(F("amount") - F("closed")))
        .values("total")
    )
    rows = (
        Account.objects.select_related("tenant")
        .filter(kind=AccountKind.HELD)
        .annotate(open_total=Coalesce(Subquery(open_holds), Value(0)))
        .exclude(balance=F("open_total"))
        .order_by("id")
    )
    return [
        Problem(f"account {a.pk} ({a.label}): cached balance {a.balance}, open holds total {a.open_total}")
        for a in rows
    ]
