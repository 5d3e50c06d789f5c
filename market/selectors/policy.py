"""Reads of market-wide and tenant policy, and of the audit log that records its changes."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Max, Sum

from accounts.models import Guarantee, Tenant
from accounts.selectors import audit_events  # noqa: F401  (the policy API reads the log through here)
from market.models import LIVE_LEASE_STATES, Lease, MarketPolicy, Round


def market_policy() -> MarketPolicy:
    """The policy row, created with the defaults (round period from ROUND_SECONDS) on first use."""
    policy, _ = MarketPolicy.objects.get_or_create(
        singleton=1, defaults={"round_seconds": settings.ROUND_SECONDS}
    )
    return policy


def current_fence() -> int:
    """The fencing number for commands written now: the newest round's id (0 before the first round)."""
    return int(Round.objects.aggregate(top=Max("pk"))["top"] or 0)


@dataclass(frozen=True)
class TenantPolicy:
    """A tenant's side of the policy: weight, guardrail (micro-credits, None = none), guaranteed GPUs by type
    name, and the GPUs its live leases hold as {(type name, tier): GPUs}."""

    tenant: Tenant
    guarantees: dict[str, int]
    held: dict[tuple[str, str], int]


def tenant_policy(*, tenant: Tenant) -> TenantPolicy:
    guarantees = Guarantee.objects.filter(tenant=tenant).order_by("gpu_type__name")
    held = (
        Lease.objects.filter(tenant=tenant, state__in=LIVE_LEASE_STATES)
        .values_list("gpu_type__name", "tier")
        .annotate(gpus=Sum("gpus"))
        .order_by("gpu_type__name", "tier")
    )
    return TenantPolicy(
        tenant=tenant,
        guarantees=dict(guarantees.values_list("gpu_type__name", "gpus")),
        held={(name, tier): int(gpus) for name, tier, gpus in held},
    )
