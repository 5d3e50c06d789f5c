"""Portal pages. Server-rendered; reads go through selectors, writes through services."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.access import user_roles, visible_tenants
from market.selectors.ledger import tenant_balance


@login_required
def home(request: HttpRequest) -> HttpResponse:
    roles = user_roles(request.user)  # type: ignore[arg-type]
    rows = [
        {"tenant": t, "role": roles.get(t.pk, "admin"), "balance": tenant_balance(tenant=t)}
        for t in visible_tenants(request.user)  # type: ignore[arg-type]
    ]
    return render(request, "frontend/home.html", {"rows": rows})
