"""Reads of the accounts app: the audit log (the admin API and the console's audit page both read it here)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from accounts.models import AuditEvent, Tenant, User


def audit_events(
    *,
    tenant: Tenant | None = None,
    actor: User | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The audit log, newest first, with its actor and tenant loaded.

    `action` matches exactly or as a dotted prefix ("ledger" finds ledger.topup and ledger.refund); `since` is
    inclusive and `until` exclusive, so consecutive windows never show an event twice."""
    qs = AuditEvent.objects.select_related("actor", "tenant").order_by("-created_at", "-id")
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if actor is not None:
        qs = qs.filter(actor=actor)
    if action:
        qs = qs.filter(Q(action=action) | Q(action__startswith=f"{action.rstrip('.')}."))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs
