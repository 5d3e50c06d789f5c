"""Reads of a tenant's spending: ledger rows with their job and GPU type, spend over time, burn rate.

A journal entry reaches its job through its lease (`JournalEntry.lease`: settle, release and extension
entries, and the holds of before issue 36, which each had one lease); a round's opening hold entry is its
tenant's for all its winners of that round and names no job. The job and the GPU type are annotated from that
lease in the same query, so filters on them and the CSV export stay one query.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import BigIntegerField, F, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, TruncDay
from django.utils import timezone

from accounts.models import Tenant
from market.models import LIVE_LEASE_STATES, AccountKind, EntryKind, JournalEntry, Lease, Posting

BURN_WINDOW = timedelta(days=7)


def _posted(tenant: Tenant | None, kind: AccountKind) -> Coalesce:
    legs = Posting.objects.filter(entry=OuterRef("pk"), account__kind=kind)
    if tenant is not None:
        legs = legs.filter(account__tenant=tenant)
    return Coalesce(Subquery(legs.values("amount")[:1]), Value(0), output_field=BigIntegerField())


def spend_entries(
    *,
    tenant: Tenant,
    since: datetime | None = None,
    before: datetime | None = None,
    kind: str | None = None,
    job_id: int | None = None,
    gpu_type: str | None = None,
) -> QuerySet[JournalEntry]:
    """The tenant's entries, newest first, each with `job_ref`, `gpu_type_name` (None for top-ups and
    refunds), `charged` (what it moved to revenue: a refund is negative) and the changes to the tenant's
    `available_change` and `held_change`. `since` is inclusive, `before` exclusive."""
    lease = Lease.objects.filter(pk=OuterRef("lease_id"))
    qs = JournalEntry.objects.filter(tenant=tenant).annotate(
        job_ref=Subquery(lease.values("job_id")[:1]),
        gpu_type_name=Subquery(lease.values("gpu_type__name")[:1]),
        charged=_posted(None, AccountKind.REVENUE),
        available_change=_posted(tenant, AccountKind.AVAILABLE),
        held_change=_posted(tenant, AccountKind.HELD),
    )
    if kind:
        qs = qs.filter(kind=kind)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if before is not None:
        qs = qs.filter(created_at__lt=before)
    if job_id is not None:
        qs = qs.filter(job_ref=job_id)
    if gpu_type:
        qs = qs.filter(gpu_type_name=gpu_type)
    return qs.select_related("actor").order_by("-created_at", "-id")


def spend_by_day(entries: QuerySet[JournalEntry], *, by: str) -> dict[str, list[tuple[datetime, int]]]:
    """Charges of these entries per day, grouped by "gpu_type_name" or "job_ref": {group: [(day, micro)]}."""
    rows = (
        entries.filter(kind__in=[EntryKind.SETTLE, EntryKind.REFUND])
        .annotate(day=TruncDay("created_at"))
        .order_by()
        .values("day", by)
        .annotate(total=Sum("charged"))
        .order_by("day")
    )
    out: dict[str, list[tuple[datetime, int]]] = {}
    for row in rows:
        key = "—" if row[by] is None else str(row[by])
        out.setdefault(key, []).append((row["day"], int(row["total"] or 0)))
    return out


@dataclass(frozen=True)
class Burn:
    """How fast the tenant spends, micro-credits: per day over the last week's charges, and per hour at its
    live leases' prices; `runway_hours` is how long its available and held money lasts at the faster."""

    per_day_week: int
    per_hour_now: int
    runway_hours: float | None


def burn_rate(*, tenant: Tenant, available: int, held: int, now: datetime | None = None) -> Burn:
    now = now or timezone.now()
    week = (
        Posting.objects.filter(
            entry__tenant=tenant, account__kind=AccountKind.REVENUE, entry__created_at__gte=now - BURN_WINDOW
        ).aggregate(total=Coalesce(Sum("amount"), 0))["total"]
        or 0
    )
    per_day = max(int(week), 0) // BURN_WINDOW.days
    live = Lease.objects.filter(tenant=tenant, state__in=LIVE_LEASE_STATES).aggregate(
        total=Coalesce(Sum(F("gpus") * F("price")), 0)
    )["total"]
    per_hour = max(int(live or 0), per_day // 24)
    runway = None if per_hour <= 0 else (available + held) / per_hour
    return Burn(per_day_week=per_day, per_hour_now=per_hour, runway_hours=runway)


def money_by_day(*, tenant: Tenant, since: datetime | None = None) -> dict[str, list[tuple[datetime, int]]]:
    """Per day, micro-credits added (top-ups and allowances), charged (settlements) and refunded: how the
    tenant's budget moved over time. One grouped query."""
    qs = JournalEntry.objects.filter(
        tenant=tenant, kind__in=[EntryKind.TOPUP, EntryKind.SETTLE, EntryKind.REFUND]
    ).annotate(day=TruncDay("created_at"), charged=_posted(None, AccountKind.REVENUE))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    rows = (
        qs.order_by()
        .values("day", "kind")
        .annotate(amount=Sum("amount"), charged_sum=Sum("charged"))
        .order_by("day")
    )
    names = {EntryKind.TOPUP: "added", EntryKind.SETTLE: "charged", EntryKind.REFUND: "refunded"}
    out: dict[str, list[tuple[datetime, int]]] = {}
    for row in rows:
        value = row["charged_sum"] if row["kind"] == EntryKind.SETTLE else row["amount"]
        out.setdefault(names[row["kind"]], []).append((row["day"], int(value or 0)))
    return out


def runway_text(hours: float) -> str:
    """How long money lasts, for people: hours while that is what one plans in, then days, months, and past a
    year just that (a runway of 639,218.2 hours says nothing a reader can use; issue 37 §5)."""
    if hours < 1:
        return f"about {max(round(hours * 60), 1)} minutes"
    if hours < 48:
        return f"about {hours:.1f} hours"
    days = hours / 24
    if days < 60:
        return f"about {round(days)} days"
    if days < 365:
        return f"about {round(days / 30.44)} months"
    return "more than a year"
