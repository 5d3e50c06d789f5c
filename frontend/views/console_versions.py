"""Console: policy versions with their diff and a revert, canaries with their guardrails (docs/portal.md,
docs/policy.md §Versions, §Canary). Admins only; every write goes through the market services."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from accounts.models import Tenant, User
from config.errors import PolicyError
from frontend.access import admin_only, page
from market.api.errors import form_errors
from market.models import OnExpiry, PolicyCanary, PolicyVersion, VersionStatus
from market.selectors.canary import canary_running
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import (
    applied_as,
    current_version,
    snapshot_diff,
    version_by_number,
    version_target,
    versions,
)
from market.selectors.shadow import shadow_run_open, shadow_versions
from market.services import canary as canaries
from market.services.policy_apply import policy_revert
from market.services.shadow import SHADOW_MAX

PER_PAGE = 25


def _user(request: HttpRequest) -> User:
    user = caller(request)
    return user


def _version(number: int) -> PolicyVersion:
    version = version_by_number(number)
    if version is None:
        raise Http404("No such policy version.")
    return version


@admin_only
def version_list(request: HttpRequest) -> HttpResponse:
    listed = Paginator(versions(), PER_PAGE).get_page(request.GET.get("page"))
    current = current_version()
    applied = applied_as(drafts=list(listed))
    for v in listed:  # a draft applied to everyone says by which version (the list shows it, not "draft")
        v.applied_number = applied[v.pk].number if v.pk in applied else None  # type: ignore[attr-defined]  # for the template
    return page(
        request,
        "frontend/console/versions.html",
        {
            "page": listed,
            "current": current,
            "canary": canary_running(),
            "in_shadow": {v.pk for v in shadow_versions(limit=SHADOW_MAX)},
        },
    )


def _shown(value: Any) -> str:
    return "–" if value is None else str(value)


@admin_only
def version_detail(request: HttpRequest, number: int) -> HttpResponse:
    version = _version(number)
    current = current_version()
    changes = [
        (c.path, _shown(c.old), _shown(c.new))
        for c in snapshot_diff(policy_snapshot(), version_target(version))
    ]
    return page(
        request,
        "frontend/console/version.html",
        {
            "version": version,
            "current": current,
            "changes": changes,
            "nonce": uuid.uuid4().hex,
            "errors": {},
            "canaries": version.canaries.order_by("-started_at")[:10],
            "proposed": version.status == VersionStatus.PROPOSED,
            "applied_as": applied_as(drafts=[version]).get(version.pk),
            "shadow_open": shadow_run_open(version=version),
            "running": canary_running(),
        },
    )


@require_POST
@admin_only
def version_revert(request: HttpRequest, number: int) -> HttpResponse:
    """The form's nonce is the revert's idempotency key: a resent form reverts once."""
    version = _version(number)
    try:
        result = policy_revert(
            actor=_user(request),
            version=version,
            reason=request.POST.get("reason", ""),
            key=f"console:{request.POST.get('nonce', '')[:64]}" if request.POST.get("nonce") else None,
        )
    except PolicyError as exc:
        messages.error(request, f"Not {_done(version)}: {exc.field}: {exc.message}.")
        return redirect("frontend:console_version", number=number)
    skipped = result.skipped_tenants + result.skipped_types
    note = f" Skipped (gone since): {', '.join(skipped)}." if skipped else ""
    if result.changed and result.version is not None:
        what = (
            f"Applied draft version {number} to everyone"
            if _draft(version)
            else f"Reverted to version {number}"
        )
        messages.success(request, f"{what}: version {result.version.number} is now in force.{note}")
    else:
        messages.success(request, f"The policy already is version {number}'s; nothing changed.{note}")
    return redirect("frontend:console_versions")


def _draft(version: PolicyVersion) -> bool:
    return version.status == VersionStatus.PROPOSED


def _done(version: PolicyVersion) -> str:
    """What the form does to this version: a draft is applied, an earlier version reverted to."""
    return "applied" if _draft(version) else "reverted"


# Canaries


def _int_or_none(raw: str, field: str, errors: dict[str, str], scale: int = 1) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return int(raw) * scale
    except ValueError:
        errors[field] = "must be a whole number"
        return None


def _canary_post(request: HttpRequest) -> tuple[PolicyCanary | None, dict[str, str]]:
    errors: dict[str, str] = {}
    number = _int_or_none(request.POST.get("version", ""), "version", errors)
    version = version_by_number(number) if number is not None else None
    if version is None and "version" not in errors:
        errors["version"] = "choose a version"
    values = {
        "duration_s": _int_or_none(request.POST.get("duration_min", ""), "duration_s", errors, 60),
        "min_compliance_pct": _int_or_none(
            request.POST.get("min_compliance_pct", ""), "min_compliance_pct", errors
        ),
        "max_failed_rounds": _int_or_none(
            request.POST.get("max_failed_rounds", ""), "max_failed_rounds", errors
        ),
        "max_preemptions_per_hour": _int_or_none(
            request.POST.get("max_preemptions_per_hour", ""), "max_preemptions_per_hour", errors
        ),
    }
    window_s = _int_or_none(request.POST.get("window_min", "60"), "window_s", errors, 60)
    if errors or version is None:
        return None, errors
    try:
        canary = canaries.canary_start(
            actor=_user(request),
            version=version,
            tenants=request.POST.getlist("tenants"),
            market=request.POST.get("market") == "on",
            on_expiry=request.POST.get("on_expiry", ""),
            reason=request.POST.get("reason", ""),
            window_s=3600 if window_s is None else window_s,
            **values,
        )
    except (PolicyError, canaries.CanaryConflict) as exc:
        return None, form_errors(exc, whole="version")
    return canary, {}


@admin_only
def canary_new(request: HttpRequest) -> HttpResponse:
    errors: dict[str, str] = {}
    if request.method == "POST":
        canary, errors = _canary_post(request)
        if canary is not None:
            messages.success(request, f"Canary of version {canary.version.number} started.")
            return redirect("frontend:console_canary", canary_id=canary.pk)
    post = request.POST if errors else None
    chosen = request.GET.get("version") or (post.get("version") if post else "")
    return page(
        request,
        "frontend/console/canary_new.html",
        {
            "versions": versions()[:50],
            "chosen": chosen,
            "tenants": Tenant.objects.filter(active=True).order_by("slug"),
            "picked": set(post.getlist("tenants")) if post else set(),
            "post": post,
            "errors": errors,
            "expiry_choices": OnExpiry.choices,
            "running": canary_running(),
        },
    )


@admin_only
def canary_detail(request: HttpRequest, canary_id: int) -> HttpResponse:
    canary = PolicyCanary.objects.select_related("version", "base", "started", "ended", "started_by").filter(
        pk=canary_id
    )
    found = canary.first()
    if found is None:
        raise Http404("No such canary.")
    changes = [
        (c.path, _shown(c.old), _shown(c.new))
        for c in snapshot_diff(found.base.snapshot, found.version.snapshot)
    ]
    return page(request, "frontend/console/canary.html", {"canary": found, "changes": changes})


@require_POST
@admin_only
def canary_end(request: HttpRequest, canary_id: int) -> HttpResponse:
    promote = request.POST.get("promote") == "1"
    end = canaries.canary_promote if promote else canaries.canary_revert
    try:
        end(actor=_user(request), canary_id=canary_id, reason=request.POST.get("reason", ""))
    except PolicyCanary.DoesNotExist as exc:
        raise Http404("No such canary.") from exc
    except (PolicyError, canaries.CanaryConflict) as exc:
        messages.error(request, f"Not done: {exc}.")
    else:
        messages.success(
            request, "Promoted to everyone." if promote else "Canary ended: its part is reverted."
        )
    return redirect("frontend:console_canary", canary_id=canary_id)
