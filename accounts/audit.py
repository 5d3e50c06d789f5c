"""The audit log: every service that changes something calls `audit` inside its transaction."""

from __future__ import annotations

from typing import Any

from accounts.models import AuditEvent, Tenant, User


def audit(*, actor: User | None, tenant: Tenant | None, action: str, detail: dict[str, Any]) -> AuditEvent:
    return AuditEvent.objects.create(actor=actor, tenant=tenant, action=action, detail=detail)
