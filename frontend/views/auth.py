"""Signing in and out, the password, and choosing a team."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller, visible_tenants
from frontend.access import my_tenants, page


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The last team used, else the first; an admin in no team goes to the console."""
    user = caller(request)
    teams = my_tenants(user)
    remembered = request.session.get("tenant")
    if remembered and visible_tenants(user).filter(slug=remembered).exists():
        return redirect("frontend:dashboard", slug=remembered)
    if teams:
        return redirect("frontend:dashboard", slug=teams[0].slug)
    if user.is_staff:
        return redirect("frontend:console")
    return page(request, "frontend/no_team.html", {})


@login_required
@require_POST
def switch(request: HttpRequest) -> HttpResponse:
    user = caller(request)
    tenant = visible_tenants(user).filter(slug=request.POST.get("tenant", "")).first()
    return redirect("frontend:dashboard", slug=tenant.slug) if tenant else redirect("frontend:home")
