"""Console: shadow rounds (docs/rounds.md §Shadow rounds). The proposed versions, which of them run in shadow
(start, stop), and per version its rounds in shadow with what differed, round by round and accumulated."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from config.errors import PolicyError
from frontend.access import admin_only, page
from frontend.shadow_text import differences, nothing_differed, round_changes
from market.models import PolicyVersion
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import applied_as, snapshot_diff, version_target
from market.selectors.shadow import (
    SHADOW_STATUS,
    compliance,
    shadow_round_view,
    shadow_rounds,
    shadow_run_open,
    shadow_runs,
    shadow_sums,
    shadow_totals,
)
from market.services.shadow import SHADOW_MAX, shadow_start, shadow_stop


@admin_only
def shadow(request: HttpRequest) -> HttpResponse:
    paged = Paginator(PolicyVersion.objects.filter(status=SHADOW_STATUS).order_by("-number"), 20).get_page(
        request.GET.get("page")
    )
    rows = [(v, shadow_run_open(version=v), shadow_sums(version=v)) for v in paged.object_list]
    return page(
        request, "frontend/console/shadow.html", {"rows": rows, "page": paged, "shadow_max": SHADOW_MAX}
    )


def _version(number: int) -> PolicyVersion:
    version = PolicyVersion.objects.filter(number=number).first()
    if version is None:
        raise Http404("No such policy version.")
    return version


@admin_only
def shadow_version(request: HttpRequest, number: int) -> HttpResponse:
    version = _version(number)
    totals = shadow_totals(version=version)
    s = totals.summary
    paged = Paginator(shadow_rounds(version=version), 50).get_page(request.GET.get("page"))
    return page(
        request,
        "frontend/console/shadow_version.html",
        {
            "version": version,
            "open_run": shadow_run_open(version=version),
            "runs": shadow_runs(version=version)[:10],
            "totals": totals,
            "fair": {
                "live": _pct(compliance(s["fair_complied_live"], s["fair_counted_live"])),
                "proposed": _pct(compliance(s["fair_complied_proposed"], s["fair_counted_proposed"])),
            },
            "tenant_rows": _tenant_rows(totals.tenants),
            "nothing": nothing_differed(
                totals.summary,
                in_force=not snapshot_diff(policy_snapshot(), version_target(version)),
            ),
            "applied_as": applied_as(drafts=[version]).get(version.pk),
            "page": paged,
            "rounds": [_round_row(shadow_round_view(r)) for r in paged.object_list],
        },
    )


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{share:.0%}"


def _tenant_rows(tenants: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Tenants the proposal changed the most first: by bids gained plus lost."""
    rows = [{"slug": slug, **t, "differs": differences(t)} for slug, t in tenants.items()]
    return sorted(rows, key=lambda t: (-(t["gained"] + t["lost"]), t["slug"]))


def _round_row(view: dict[str, Any]) -> dict[str, Any]:
    return {
        **view,
        # Every tenant the round changed, with what changed (not only bids gained and lost).
        "changed": round_changes(view["tenants"])[:5],
        "more": max(len(view["tenants"]) - 5, 0),
        "price_rows": [
            (name, p) for name, p in view["prices"].items() if p["posted_live"] != p["posted_proposed"]
        ],
    }


@admin_only
@require_POST
def shadow_toggle(request: HttpRequest, number: int, action: str) -> HttpResponse:
    version = _version(number)
    if action not in ("start", "stop"):
        raise Http404("No such action.")
    service = shadow_start if action == "start" else shadow_stop
    try:
        service(actor=caller(request), version=version)
    except PolicyError as exc:
        messages.error(request, f"Not {'started' if action == 'start' else 'stopped'}: {exc.message}.")
    else:
        messages.success(
            request,
            "Shadow started: from the next round on, each round is also cleared under this version."
            if action == "start"
            else "Shadow stopped. Its rounds stay until the retention period prunes them.",
        )
    return redirect("frontend:console_shadow_version", number=version.number)
