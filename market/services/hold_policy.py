"""A tenant manager's choice of hold sizing (docs/predictions.md §Holds sized by prediction)."""

from __future__ import annotations

from django.db import transaction

from accounts.access import can_manage
from accounts.audit import audit
from accounts.models import Tenant, User
from market.models import HoldPolicy, OnHoldEnd


class HoldPolicyRefused(Exception):
    """Neither a manager of the tenant nor a platform admin."""


@transaction.atomic
def hold_policy_set(
    *, tenant: Tenant, actor: User, sized_by_prediction: bool | None = None, on_hold_end: str | None = None
) -> HoldPolicy:
    """Change the tenant's hold sizing; fields left None keep their value. Audited with before and after.
    It applies to holds taken from the next round on: a running lease keeps the hold it won with."""
    if not can_manage(actor, tenant):
        raise HoldPolicyRefused("Only the tenant's managers or platform admins may change its hold sizing.")
    if on_hold_end is not None and on_hold_end not in OnHoldEnd.values:
        raise ValueError(f"on_hold_end must be one of {', '.join(OnHoldEnd.values)}")
    policy, _ = HoldPolicy.objects.select_for_update(no_key=True).get_or_create(tenant=tenant)
    before = {"sized_by_prediction": policy.sized_by_prediction, "on_hold_end": policy.on_hold_end}
    if sized_by_prediction is not None:
        policy.sized_by_prediction = sized_by_prediction
    if on_hold_end is not None:
        policy.on_hold_end = on_hold_end
    policy.updated_by = actor
    policy.save()
    after = {"sized_by_prediction": policy.sized_by_prediction, "on_hold_end": policy.on_hold_end}
    if after != before:
        audit(
            actor=actor, tenant=tenant, action="tenant.hold_policy", detail={"before": before, "after": after}
        )
    return policy
