"""Reads of recurring allowances: the next credit and the history of credits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Tenant
from market.models import Allowance, AllowancePeriod, JournalEntry


def period_start(period: str, now: datetime) -> datetime:
    """The start (UTC midnight) of the day, ISO week (Monday) or calendar month containing `now`."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == AllowancePeriod.WEEK:
        return day - timedelta(days=day.weekday())
    if period == AllowancePeriod.MONTH:
        return day.replace(day=1)
    return day


def allowance_history(*, tenant: Tenant) -> QuerySet[JournalEntry]:
    """The tenant's allowance credits, newest first."""
    return JournalEntry.objects.filter(tenant=tenant, key__startswith=f"allowance:{tenant.pk}:").order_by(
        "-created_at", "-id"
    )


def next_allowance(allowance: Allowance, now: datetime | None = None) -> datetime:
    """When the next period starts."""
    start = period_start(allowance.period, now or timezone.now())
    if allowance.period == AllowancePeriod.DAY:
        return start + timedelta(days=1)
    if allowance.period == AllowancePeriod.WEEK:
        return start + timedelta(days=7)
    return (start + timedelta(days=32)).replace(day=1)
