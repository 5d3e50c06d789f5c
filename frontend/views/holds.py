"""The team's hold sizing: every member reads it, managers change it (market.services.hold_policy)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.access import caller
from frontend.access import page, seat
from market.models import OnHoldEnd
from market.selectors.holds import MIN_HOLD_SECONDS, WARN_BEFORE, hold_policy
from market.services.hold_policy import HoldPolicyRefused, hold_policy_set


@login_required
def holds(request: HttpRequest, slug: str) -> HttpResponse:
    s = seat(request, slug)
    error = ""
    if request.method == "POST":
        if not s.manages:
            raise PermissionDenied("Only the team's managers may change its hold sizing.")
        choice = request.POST.get("on_hold_end", "")
        if choice not in OnHoldEnd.values:
            error = "Choose what happens when a job outlives its hold."
        else:
            try:
                hold_policy_set(
                    tenant=s.tenant,
                    actor=caller(request),
                    sized_by_prediction=request.POST.get("sized_by_prediction") == "on",
                    on_hold_end=choice,
                )
            except HoldPolicyRefused as exc:
                raise PermissionDenied(str(exc)) from exc
            messages.success(request, "Hold sizing saved; it applies to holds taken from the next round.")
            return redirect("frontend:holds", slug=s.tenant.slug)
    return page(
        request,
        "frontend/holds.html",
        {
            "policy": hold_policy(tenant=s.tenant),
            "choices": OnHoldEnd.choices,
            "error": error,
            "warn_minutes": int(WARN_BEFORE.total_seconds() // 60),
            "min_minutes": MIN_HOLD_SECONDS // 60,
        },
        s,
    )
