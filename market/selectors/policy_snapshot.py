"""The whole market policy as one plain value: what a policy version records, a shadow round clears under and
a revert or canary applies (docs/policy.md §Versions).

A snapshot holds every knob an admin can change: the market-wide row (every setting of
market.services.policy.POLICY_LIMITS), each GPU type's price bounds, and per tenant its weight, guardrail,
guarantees and allowance. It is JSON as it stands (ints, strings, None), so it is stored as it is and two
snapshots compare with ==. Tenants and types are named by slug and name, not id, so a snapshot reads the same in
the console, the API and an audit row.
"""

from __future__ import annotations

from typing import TypedDict

from accounts.models import Tenant
from inventory.models import GpuType
from market.models import Allowance, Guarantee
from market.models.policy import POLICY_LIMITS
from market.selectors.policy import market_policy


class GpuTypePolicy(TypedDict):
    reserve_price: int
    max_price: int


class AllowancePolicy(TypedDict):
    amount: int
    period: str
    cap: int
    active: bool


class TenantPolicy(TypedDict):
    weight: int
    guardrail: int | None
    # GPU type name -> guaranteed GPUs (a type without a guarantee is absent, never 0).
    guarantees: dict[str, int]
    allowance: AllowancePolicy | None


class PolicySnapshot(TypedDict):
    # Setting name -> value, every key of POLICY_LIMITS.
    market: dict[str, int]
    # GPU type name -> price bounds (micro-credits per GPU-hour).
    gpu_types: dict[str, GpuTypePolicy]
    # Active tenants by slug.
    tenants: dict[str, TenantPolicy]


def policy_snapshot() -> PolicySnapshot:
    """The policy in force now, read in four queries."""
    row = market_policy()
    guarantees: dict[int, dict[str, int]] = {}
    for tenant_id, type_name, gpus in Guarantee.objects.values_list("tenant_id", "gpu_type__name", "gpus"):
        guarantees.setdefault(tenant_id, {})[type_name] = gpus
    allowances: dict[int, AllowancePolicy] = {
        a.tenant_id: AllowancePolicy(amount=a.amount, period=a.period, cap=a.cap, active=a.active)
        for a in Allowance.objects.all()
    }
    return PolicySnapshot(
        market={name: int(getattr(row, name)) for name in POLICY_LIMITS},
        gpu_types={
            name: GpuTypePolicy(reserve_price=reserve, max_price=top)
            for name, reserve, top in GpuType.objects.order_by("name").values_list(
                "name", "reserve_price", "max_price"
            )
        },
        tenants={
            slug: TenantPolicy(
                weight=weight,
                guardrail=guardrail,
                guarantees=dict(sorted(guarantees.get(pk, {}).items())),
                allowance=allowances.get(pk),
            )
            for pk, slug, weight, guardrail in Tenant.objects.filter(active=True)
            .order_by("slug")
            .values_list("pk", "slug", "weight", "guardrail")
        },
    )
