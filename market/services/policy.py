"""Writes for market-wide and tenant policy (docs/policy.md). Admins only, keyword-only, atomic, audited.

Every function validates all of its input before it writes anything, locks the row it changes, and writes one
audit row whose detail is {field: [old, new]} for the fields that changed; a change that changes nothing writes
no audit row. Bad values raise PolicyError naming the field, which the API answers with a 400.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts.audit import audit
from accounts.models import Tenant, User
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from inventory.models import GpuType
from market.models import Guarantee, MarketPolicy
from market.models.policy import GUARANTEE_MAX, POLICY_LIMITS, WEIGHT_LIMITS
from market.selectors.policy import forget_cached_policy, market_policy
from market.services.guarantees import guarantee_set
from market.services.policy_versions import policy_versioned


class Unset(Enum):
    """Marks an argument that was not given, where None is a meaningful value (no guardrail)."""

    UNSET = "unset"


UNSET = Unset.UNSET


def _admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may change market policy.")
    return actor


def check_int(field: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(field, "must be a whole number")
    if not low <= value <= high:
        raise PolicyError(field, f"must be between {low} and {high}")
    return value


def policy_check(changes: dict[str, Any]) -> None:
    """Raise PolicyError for the first unknown setting or value out of its range."""
    for field, value in changes.items():
        if field not in POLICY_LIMITS:
            raise PolicyError(field, "is not a market policy setting")
        check_int(field, value, *POLICY_LIMITS[field])


@transaction.atomic
def policy_update(*, actor: User | None, reason: str = "", **changes: Any) -> MarketPolicy:
    """Change some knobs of the market policy; the next round started reads them (docs/policy.md). A change
    records a policy version with `reason` (docs/policy.md §Versions)."""
    admin = _admin(actor)
    policy_check(changes)
    with policy_versioned(actor=admin, reason=reason):
        market_policy()  # creates the row with its defaults on first use
        policy = MarketPolicy.objects.select_for_update(no_key=True).get(singleton=1)
        diff = {f: [getattr(policy, f), v] for f, v in changes.items() if getattr(policy, f) != v}
        if diff:
            for field, (_, new) in diff.items():
                setattr(policy, field, new)
            policy.save(update_fields=[*diff, "updated_at"])
            forget_cached_policy()
            audit(actor=admin, tenant=None, action="policy.update", detail=diff)
    return policy


def guardrail_check(guardrail: int | None) -> None:
    if guardrail is not None:
        check_int("guardrail", guardrail, 0, MAX_AMOUNT)


def _check_guarantees(guarantees: dict[str, int]) -> dict[str, GpuType]:
    """GPU types named in guarantees, by name; PolicyError naming `guarantees.<name>` for a bad entry."""
    types = GpuType.objects.in_bulk(list(guarantees), field_name="name")
    for name, gpus in guarantees.items():
        if name not in types:
            raise PolicyError(f"guarantees.{name}", "is not a GPU type")
        check_int(f"guarantees.{name}", gpus, 0, GUARANTEE_MAX)
    return types


def _apply_guarantees(
    *, actor: User, tenant: Tenant, guarantees: dict[str, int], types: dict[str, GpuType]
) -> dict[str, list[int]]:
    """Set the changed guarantees through guarantee_set (which keeps them within the cluster's GPUs); the
    diff as {"guarantees.<type>": [old, new]}. Types go in name order so concurrent changes lock alike."""
    held = dict(Guarantee.objects.filter(tenant=tenant).values_list("gpu_type__name", "gpus"))
    diff: dict[str, list[int]] = {}
    for name in sorted(guarantees):
        old, new = held.get(name, 0), guarantees[name]
        if old == new:
            continue
        try:
            guarantee_set(tenant=tenant, gpu_type=types[name], gpus=new, actor=actor)
        except PolicyError as exc:
            raise PolicyError(f"guarantees.{name}", exc.message) from exc
        diff[f"guarantees.{name}"] = [old, new]
    return diff


@transaction.atomic
def tenant_policy_update(
    *,
    actor: User | None,
    tenant: Tenant,
    weight: int | None = None,
    guardrail: int | None | Unset = UNSET,
    guarantees: dict[str, int] | None = None,
    reason: str = "",
) -> Tenant:
    """Change a tenant's weight, guardrail (micro-credits; None removes it) and guarantees ({type name: GPUs};
    0 removes one). All or nothing: any refused part leaves every part unchanged. A change records a policy
    version with `reason`."""
    admin = _admin(actor)
    if weight is not None:
        check_int("weight", weight, *WEIGHT_LIMITS)
    if not isinstance(guardrail, Unset):
        guardrail_check(guardrail)
    types = _check_guarantees(guarantees or {})
    with policy_versioned(actor=admin, reason=reason):
        return _tenant_policy_write(admin, tenant, weight, guardrail, guarantees or {}, types)


def _tenant_policy_write(
    admin: User,
    tenant: Tenant,
    weight: int | None,
    guardrail: int | None | Unset,
    guarantees: dict[str, int],
    types: dict[str, GpuType],
) -> Tenant:
    locked = Tenant.objects.select_for_update(no_key=True).get(pk=tenant.pk)
    diff: dict[str, list[Any]] = {}
    if weight is not None and weight != locked.weight:
        diff["weight"] = [locked.weight, weight]
        locked.weight = weight
    if not isinstance(guardrail, Unset) and guardrail != locked.guardrail:
        diff["guardrail"] = [locked.guardrail, guardrail]
        locked.guardrail = guardrail
    if diff:
        locked.save(update_fields=list(diff))
    diff |= _apply_guarantees(actor=admin, tenant=locked, guarantees=guarantees, types=types)
    if diff:
        audit(actor=admin, tenant=locked, action="tenant_policy.update", detail=diff)
    return locked
