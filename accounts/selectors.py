"""Reads of tenancy data: the audit log."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from accounts.models import AuditEvent, Tenant, User


def audit_events(
    *,
    tenant: Tenant | None = None,
    actor: User | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The audit log, newest first. `action` matches exactly, or a family with a trailing dot ("ledger."
    gives every ledger action); `since` is inclusive, `until` exclusive."""
    qs = AuditEvent.objects.select_related("actor", "tenant").order_by("-created_at", "-id")
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if actor is not None:
        qs = qs.filter(actor=actor)
    if action:
        qs = qs.filter(action__startswith=action) if action.endswith(".") else qs.filter(action=action)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs
