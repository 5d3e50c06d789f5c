"""Signing in and out, the password, and choosing a team."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller, visible_tenants
from frontend.access import my_tenants, page
from frontend.views.sso import sso_enabled


class SignInView(auth_views.LoginView):
    """The password form (unless LOCAL_LOGIN is off) and, when a provider is configured, its button."""

    template_name = "frontend/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context |= {
            "sso_enabled": sso_enabled(),
            "sso_name": settings.OIDC_PROVIDER_NAME,
            "local_login": settings.LOCAL_LOGIN,
        }
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.LOCAL_LOGIN:
            response = self.render_to_response(
                self.get_context_data(sso_error="Passwords are off here: sign in with your organisation.")
            )
            response.status_code = 403
            return response
        return super().post(request, *args, **kwargs)


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
