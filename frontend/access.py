"""Who the viewer is in the tenant a portal page names: every tenant page comes through `seat`.

A tenant the viewer cannot see is a 404 (its existence does not leak); console pages need a platform admin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render

from accounts.access import caller, can_manage, user_roles, visible_tenants
from accounts.models import Role, Tenant, User

# Whatever the view returns: a page, or a streamed download (the audit CSV).
_Response = TypeVar("_Response", bound=HttpResponseBase)

ROLE_NAMES = {Role.MANAGER: "owner", Role.MEMBER: "member"}


@dataclass(frozen=True)
class Seat:
    tenant: Tenant
    role: str  # "owner", "member", or "admin" for a platform admin who is not a member
    manages: bool


def seat(request: HttpRequest, slug: str) -> Seat:
    user = caller(request)
    tenant = visible_tenants(user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("No such team.")
    role = user_roles(user).get(tenant.pk)
    request.session["tenant"] = tenant.slug  # the switcher and "/" remember the last team used
    return Seat(
        tenant=tenant,
        role=ROLE_NAMES.get(Role(role), role) if role else "admin",
        manages=can_manage(user, tenant),
    )


def my_tenants(user: User) -> list[Tenant]:
    """The teams the switcher offers: the user's own (an admin sees every team in the console instead)."""
    return list(Tenant.objects.filter(memberships__user=user, active=True).order_by("name"))


def page(request: HttpRequest, template: str, context: dict[str, Any], s: Seat | None = None) -> HttpResponse:
    """Render a portal page with what the layout needs: the seat and the switcher's teams."""
    user = caller(request)
    console = request.path.startswith("/console/")
    return render(
        request, template, {"seat": s, "my_tenants": my_tenants(user), "console": console, **context}
    )


def admin_only(view: Callable[..., _Response]) -> Callable[..., _Response]:
    """Console pages: log in first; a signed-in user who is not a platform admin gets 403."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> _Response:
        if not caller(request).is_staff:
            raise PermissionDenied("Only platform admins may open the console.")
        return view(request, *args, **kwargs)

    return wrapped
