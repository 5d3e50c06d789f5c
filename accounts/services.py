"""Writes for tenancy: tenants and memberships. Keyword-only, atomic, audited.

Guarantees are the market's (market.models.Guarantee, written by market.services.guarantees)."""

from __future__ import annotations

from django.db import transaction

from accounts.audit import audit
from accounts.models import Membership, Role, Tenant, User
from config.errors import PolicyError


@transaction.atomic
def tenant_create(*, name: str, slug: str, weight: int = 1, actor: User | None = None) -> Tenant:
    if weight < 1:
        raise PolicyError("weight", "must be a whole number of at least 1")
    tenant = Tenant.objects.create(name=name, slug=slug, weight=weight)
    audit(actor=actor, tenant=tenant, action="tenant.create", detail={"slug": slug, "weight": weight})
    return tenant


@transaction.atomic
def membership_set(*, tenant: Tenant, user: User, role: str, actor: User | None = None) -> Membership:
    if role not in Role.values:
        raise PolicyError("role", f"must be one of {', '.join(Role.values)}")
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    audit(actor=actor, tenant=tenant, action="membership.set", detail={"user": user.username, "role": role})
    return membership


@transaction.atomic
def membership_remove(*, tenant: Tenant, user: User, actor: User | None = None) -> bool:
    """Take the user out of the tenant (their tokens for it stop working at once); False if not a member."""
    removed, _ = Membership.objects.filter(tenant=tenant, user=user).delete()
    if removed:
        audit(actor=actor, tenant=tenant, action="membership.remove", detail={"user": user.username})
    return bool(removed)
