"""Tenant-scoped access. Views never fetch tenant data by primary key directly; they come through here.

A caller who is not in a tenant gets 404 for it and everything in it, so existence does not leak; a caller in
the tenant without the needed role gets 403.
"""

from __future__ import annotations

from typing import Any

from django.core import exceptions as django_exceptions
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from accounts.models import ApiToken, Membership, Role, Tenant, User


def caller(request: HttpRequest | Request) -> User:
    """The signed-in user behind a request, typed as one. Every API view needs an authenticated caller (the
    default permission) and every portal view is login_required, so an anonymous one never gets here; were one
    to, Django's PermissionDenied is a 403 in both the API and the portal, not a 500."""
    user = request.user
    if not isinstance(user, User):
        raise django_exceptions.PermissionDenied("Sign in first.")
    return user


def user_roles(user: User) -> dict[int, str]:
    """tenant id -> role, for the tenants the user belongs to."""
    return dict(Membership.objects.filter(user=user, tenant__active=True).values_list("tenant_id", "role"))


def visible_tenants(user: User, auth: Any = None) -> QuerySet[Tenant]:
    """Tenants the caller may see. A token is bound to one tenant and sees only that one."""
    if isinstance(auth, ApiToken):
        return Tenant.objects.filter(pk=auth.tenant_id)
    if user.is_staff:
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user, active=True)


def access_tenant(user: User, slug: str, *, auth: Any = None, manage: bool = False) -> Tenant:
    """The tenant named by slug if the caller may see it (404 otherwise); with manage, also its manager."""
    if isinstance(auth, ApiToken):
        # The token was loaded with its tenant, and its authentication checked the tenant is active and the
        # user still a member: no need to ask the database again.
        tenant = auth.tenant if auth.tenant.slug == slug else None
    else:
        tenant = visible_tenants(user, auth).filter(slug=slug).first()
    if tenant is None:
        raise Http404("No such tenant.")
    if manage and not can_manage(user, tenant):
        raise PermissionDenied("Only the tenant's managers or platform admins may do this.")
    return tenant


def can_manage(user: User, tenant: Tenant) -> bool:
    if user.is_staff:
        return True
    return Membership.objects.filter(user=user, tenant=tenant, role=Role.MANAGER).exists()


def is_member(user: User, tenant: Tenant) -> bool:
    """The membership rule: a platform admin, or any member of the tenant (whatever the role)."""
    return user.is_staff or Membership.objects.filter(user=user, tenant=tenant).exists()


def owner_or_manager(
    user: User, *, owner_id: int | None, tenant: Tenant, manages: bool | None = None
) -> bool:
    """The owner rule: whoever owns a thing of the tenant (a job's submitter, a token's user) may change it,
    and so may the tenant's managers and platform admins. `manages`: can_manage already asked (the portal's
    seat has it), to save the query."""
    if user.pk is not None and user.pk == owner_id:
        return True
    return can_manage(user, tenant) if manages is None else manages


def require_admin(user: User) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only platform admins may do this.")
