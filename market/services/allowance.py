"""Recurring allowances: set by admins, applied once per period by a periodic task (docs/ledger.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.audit import audit
from accounts.models import Tenant, User
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from market.models import Account, AccountKind, Allowance, AllowancePeriod, JournalEntry
from market.selectors.allowance import period_start
from market.services.ledger import ledger_grant
from market.services.policy_versions import policy_versioned


def allowance_key(tenant: Tenant, period: str, start: datetime) -> str:
    return f"allowance:{tenant.pk}:{period}:{start:%Y-%m-%d}"


def allowance_check(amount: Any, period: Any, cap: Any) -> None:
    """PolicyError naming `amount`, `period` or `cap` for a value allowance_set would refuse."""
    for field, value, low in (("amount", amount, 1), ("cap", cap, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(field, "must be a whole number of micro-credits")
        if not low <= value <= MAX_AMOUNT:
            raise PolicyError(field, "must be positive" if low else "must not be negative")
    if period not in AllowancePeriod.values:
        raise PolicyError("period", f"must be one of {', '.join(AllowancePeriod.values)}")


@transaction.atomic
def allowance_set(
    *,
    actor: User,
    tenant: Tenant,
    amount: int,
    period: str,
    cap: int,
    active: bool = True,
    reason: str = "",
) -> Allowance:
    """Create or change a tenant's allowance; audited as {field: [old, new]}. Changing the period does not
    re-apply the current one: the next period start is the first under the new setting. A change records a
    policy version with `reason`."""
    if not actor.is_staff:
        raise PermissionDenied("Only platform admins may set allowances.")
    allowance_check(amount, period, cap)
    if not isinstance(active, bool):
        raise PolicyError("active", "must be true or false")
    values = {"amount": amount, "period": period, "cap": cap, "active": active}
    with policy_versioned(actor=actor, reason=reason):
        return _write(actor, tenant, values)


def _write(actor: User, tenant: Tenant, values: dict[str, Any]) -> Allowance:
    allowance = Allowance.objects.select_for_update(no_key=True).filter(tenant=tenant).first()
    if allowance is None:
        allowance = Allowance.objects.create(tenant=tenant, **values)
        audit(actor=actor, tenant=tenant, action="allowance.create", detail=dict(values))
        return allowance
    diff = {f: [getattr(allowance, f), v] for f, v in values.items() if getattr(allowance, f) != v}
    if diff:
        for field, (_, new) in diff.items():
            setattr(allowance, field, new)
        allowance.save(update_fields=[*diff, "updated_at"])
        audit(actor=actor, tenant=tenant, action="allowance.update", detail=diff)
    return allowance


@transaction.atomic
def _apply_one(allowance_id: int, now: datetime) -> JournalEntry | None:
    allowance = Allowance.objects.select_related("tenant").get(pk=allowance_id)
    start = period_start(allowance.period, now)
    # The claim: only one transaction can move last_period to this period's start.
    claimed = (
        Allowance.objects.filter(pk=allowance_id, active=True)
        .filter(Q(last_period__isnull=True) | Q(last_period__lt=start))
        .update(last_period=start)
    )
    if not claimed:
        return None
    tenant = allowance.tenant
    available = (
        Account.objects.filter(tenant=tenant, kind=AccountKind.AVAILABLE)
        .values_list("balance", flat=True)
        .first()
        or 0
    )
    amount = min(allowance.amount, allowance.cap - available)
    if amount <= 0:  # at the cap: this period is used up without a credit
        audit(actor=None, tenant=tenant, action="allowance.capped", detail={"period": start.isoformat()})
        return None
    return ledger_grant(
        tenant=tenant,
        amount=amount,
        key=allowance_key(tenant, allowance.period, start),
        memo=f"allowance for the {allowance.period} from {start:%Y-%m-%d}",
    )


def allowances_apply(*, now: datetime | None = None) -> list[JournalEntry]:
    """Apply every active allowance whose current period has not been applied; what the beat task runs.
    One transaction per tenant, so one tenant's failure does not hold up the others' credit."""
    now = now or timezone.now()
    entries = []
    for allowance_id in Allowance.objects.filter(active=True).order_by("pk").values_list("pk", flat=True):
        entry = _apply_one(allowance_id, now)
        if entry is not None:
            entries.append(entry)
    return entries
