"""Reads of market-wide and tenant policy (the audit log that records its changes: accounts.selectors)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Max, Sum

from accounts.models import Tenant
from market.models import LIVE_LEASE_STATES, Guarantee, Lease, MarketPolicy, Round


def market_policy() -> MarketPolicy:
    """The policy row, created with the defaults (round period from ROUND_SECONDS) on first use."""
    policy, _ = MarketPolicy.objects.get_or_create(
        singleton=1, defaults={"round_seconds": settings.ROUND_SECONDS}
    )
    return policy


def idle_util_pct() -> int:
    """The idle policy's threshold alone, for the usage ingest (every agent report, thousands a second): one
    column by plain SQL, no model instance. Before the policy row exists, the model's default (0: off), which
    is what market_policy() would create."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT idle_util_pct FROM {MarketPolicy._meta.db_table} WHERE singleton = 1")
        row = cur.fetchone()
    return int(row[0]) if row else int(MarketPolicy._meta.get_field("idle_util_pct").default)


# The policy row as a job submit reads it (its default grace period), from the cache: a query saved on every
# submit (bench/api.py). policy_update drops it when it changes the row and again when that commits; any other
# change (the Django admin) reaches submits within POLICY_CACHE_S. Rounds read the row itself.
POLICY_CACHE_KEY = "market:policy"
POLICY_CACHE_S = 10


def market_policy_cached() -> MarketPolicy:
    policy = cache.get(POLICY_CACHE_KEY)
    if not isinstance(policy, MarketPolicy):
        policy = market_policy()
        cache.set(POLICY_CACHE_KEY, policy, POLICY_CACHE_S)
    return policy


def forget_cached_policy() -> None:
    cache.delete(POLICY_CACHE_KEY)
    transaction.on_commit(lambda: cache.delete(POLICY_CACHE_KEY))


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
