"""Console: what-if replays of the platform's own history (docs/whatif.md). Admins only."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from config.errors import PolicyError
from config.money import format_credits
from frontend import whatif_form
from frontend.access import admin_only, page
from market.api.errors import form_errors
from whatif import tasks as whatif_tasks
from whatif.models import WhatIfPlot, WhatIfRun, WhatIfState
from whatif.policy import today_policy
from whatif.selectors import versions_from_run
from whatif.services import WhatIfError, whatif_apply, whatif_propose, whatif_request

PLOT_CAPTIONS = {
    "utilization": "Utilisation and waiting demand",
    "queue_cdf": "Queueing delay (CDF)",
    "tenants": "GPUs held per tenant against its guarantee",
    "prices": "Price per GPU type",
}
# (label, summary key, how to show it, which way is better)
FIGURES = (
    ("Jobs completed", "completed", "int", "higher"),
    ("Jobs never run", "rejected", "int", "lower"),
    ("Average queueing delay", "avg_queue_s", "duration", "lower"),
    ("Median queueing delay", "p50_queue_s", "duration", "lower"),
    ("95th percentile queueing delay", "p95_queue_s", "duration", "lower"),
    ("Utilisation, first to last submit", "utilization", "share", "higher"),
    ("Utilisation while jobs waited", "busy_utilization", "share", "higher"),
    ("Fair-share compliance, 24 h windows", "fair_share_compliance_24h", "share", "higher"),
    ("Fair-share compliance, 1 h windows", "fair_share_compliance_1h", "share", "higher"),
    ("Fair-share compliance, per round", "fair_share_round_compliance", "share", "higher"),
    ("Fair-share shortfall", "fair_share_shortfall", "ratio", "lower"),
    ("Guarantee compliance", "guarantee_compliance", "share", "higher"),
    ("Preemptions", "preemptions", "int", "lower"),
    ("GPU-hours lost to preemption", "lost_gpu_hours", "hours", "lower"),
    ("Share of GPU-hours lost", "lost_share", "share", "lower"),
    ("Leases moved to make room for gangs", "moves", "int", "lower"),
    ("GPU-hours lost to moves", "moved_lost_gpu_hours", "hours", "lower"),
    ("GPU-hours idle on reserved nodes", "reserved_idle_gpu_hours", "hours", "lower"),
    ("GPU-hours backfilled on reserved nodes", "backfilled_gpu_hours", "hours", "higher"),
    ("Jain's index of excess per weight (diagnostic)", "jain_excess", "ratio", "higher"),
    ("Spend (credits)", "spend", "credits", None),
)
TENANT_FIGURES = (
    ("spend", "credits"),
    ("completed", "int"),
    ("avg_queue_s", "duration"),
    ("preemptions", "int"),
    ("guarantee_compliance", "share"),
    ("fair_share_compliance_24h", "share"),
    ("fair_share_shortfall", "ratio"),
    ("lost_gpu_hours", "hours"),
)


def _shown(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "duration":
        return f"{value / 3600:.2f} h" if value >= 3600 else f"{value:.0f} s"
    if kind == "share":
        return f"{value * 100:.1f}%"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "hours":
        return f"{value:,.1f} GPU-h"
    if kind == "credits":
        return f"{value:,.2f}"
    return str(value)


def _verdict(today: Any, proposal: Any, better: str | None) -> str:
    if today is None or proposal is None or better is None or today == proposal:
        return ""
    return "better" if (proposal > today) == (better == "higher") else "worse"


def _comparison(result: dict[str, Any]) -> dict[str, Any]:
    today, proposal = result["summaries"]["today"], result["summaries"]["proposal"]
    actual = result.get("actual", {})
    rows = [
        {
            "label": label,
            "actual": _shown(actual[key], kind) if key in actual else "",
            "today": _shown(today.get(key), kind),
            "proposal": _shown(proposal.get(key), kind),
            "verdict": _verdict(today.get(key), proposal.get(key), better),
        }
        for label, key, kind, better in FIGURES
    ]
    tenants = [
        {
            "name": name,
            "cells": [
                (_shown(figures.get(k), kind), _shown(proposal["per_tenant"].get(name, {}).get(k), kind))
                for k, kind in TENANT_FIGURES
            ],
        }
        for name, figures in today["per_tenant"].items()
    ]
    return {"rows": rows, "tenants": tenants}


def _changes(run: WhatIfRun) -> list[str]:
    """The proposal in words, only what differs from the policy the run compared it with."""
    base, new = run.baseline, run.proposal
    knobs = ("price_step_bp", "min_runtime_s", "fair_share_half_life_s", "checkpoint_min")
    # .get: a run stored before a knob existed names neither side of it
    out = [f"{k}: {base.get(k)} → {new.get(k)}" for k in knobs if base.get(k) != new.get(k)]
    if base["fair_reclaim"] != new["fair_reclaim"]:
        out.append(f"fair reclaim: {'on' if new['fair_reclaim'] else 'off'}")
    for name, prices in new["types"].items():
        for bound in ("reserve", "max"):
            if prices[bound] != base["types"][name][bound]:
                old, now = format_credits(base["types"][name][bound]), format_credits(prices[bound])
                out.append(f"{name} {bound} price: {old} → {now} credits")
    for slug, t in new["tenants"].items():
        old = base["tenants"][slug]
        if t["weight"] != old["weight"]:
            out.append(f"{slug} weight: {old['weight']} → {t['weight']}")
        for name in sorted(set(t["guarantees"]) | set(old["guarantees"])):
            a, b = old["guarantees"].get(name, 0), t["guarantees"].get(name, 0)
            if a != b:
                out.append(f"{slug} guarantee of {name}: {a} → {b} GPUs")
    return out


def _run(run_id: int) -> WhatIfRun:
    run = WhatIfRun.objects.filter(pk=run_id).select_related("created_by", "applied_by").first()
    if run is None:
        raise Http404("No such what-if.")
    return run


@admin_only
def whatif(request: HttpRequest) -> HttpResponse:
    base = today_policy()
    errors: dict[str, str] = {}
    values = whatif_form.initial(base)
    if request.method == "POST":
        parsed = whatif_form.parse(request.POST, base)
        errors = parsed.errors
        values = {k: request.POST.get(k, "") for k in values}
        if not errors and parsed.since and parsed.until:
            try:
                run = whatif_request(
                    actor=caller(request),
                    since=parsed.since,
                    until=parsed.until,
                    proposal=parsed.proposal,
                    enqueue=whatif_tasks.whatif_run.delay,
                )
            except PolicyError as exc:
                errors = form_errors(exc)
            else:
                return redirect("frontend:console_whatif_run", run_id=run.pk)
    runs = Paginator(WhatIfRun.objects.select_related("created_by"), 20).get_page(request.GET.get("page"))

    def cell(name: str) -> dict[str, str]:
        return {"name": name, "value": values.get(name, ""), "error": errors.get(name, "")}

    types = list(base["types"])
    response = page(
        request,
        "frontend/console/whatif.html",
        {
            "fields": {
                k: cell(k)
                for k in (
                    "since",
                    "until",
                    "price_step_bp",
                    "min_runtime_s",
                    "fair_share_half_life_s",
                    "checkpoint_min",
                )
            },
            "fair_reclaim": values.get("fair_reclaim") == "on",
            "errors": errors,
            "types": types,
            "type_rows": [(t, cell(f"reserve-{t}"), cell(f"max-{t}")) for t in types],
            "tenant_rows": [
                (s, cell(f"weight-{s}"), [cell(f"guarantee-{s}-{t}") for t in types]) for s in base["tenants"]
            ],
            "sum_errors": [errors[f"guarantees-{t}"] for t in types if f"guarantees-{t}" in errors],
            "runs": runs,
        },
    )
    if errors:
        response.status_code = 400
    return response


@admin_only
def whatif_run(request: HttpRequest, run_id: int) -> HttpResponse:
    return _run_page(request, _run(run_id))


def _run_page(
    request: HttpRequest, run: WhatIfRun, errors: dict[str, str] | None = None, reason: str | None = None
) -> HttpResponse:
    context: dict[str, Any] = {
        "run": run,
        "changes": _changes(run),
        "finished": run.state == WhatIfState.DONE,
        "versions": versions_from_run(run_id=run.pk),
        "propose": {
            "nonce": uuid.uuid4().hex,
            "reason": f"what-if run {run.pk}" if reason is None else reason,
            "errors": errors or {},
        },
    }
    if run.state == WhatIfState.DONE and run.result and "summaries" in run.result:
        context["comparison"] = _comparison(run.result)
        order = list(PLOT_CAPTIONS)
        names = sorted(
            run.plots.values_list("name", flat=True), key=lambda n: (order.index(n) if n in order else 99, n)
        )
        context["plots"] = [(name, PLOT_CAPTIONS.get(name, name)) for name in names]
        context["tenant_heads"] = [
            "Spend",
            "Completed",
            "Average queue",
            "Preemptions",
            "Guarantee compliance",
            "Fair-share compliance, 24 h",
            "Fair-share shortfall",
            "GPU-hours lost",
        ]
    response = page(request, "frontend/console/whatif_run.html", context)
    if errors:
        response.status_code = 400
    return response


@admin_only
def whatif_status(request: HttpRequest, run_id: int) -> JsonResponse:
    """What the run page polls while the replay runs."""
    run = _run(run_id)
    return JsonResponse({"state": run.state, "progress": run.progress, "message": run.message})


@admin_only
def whatif_plot(request: HttpRequest, run_id: int, name: str) -> HttpResponse:
    plot = WhatIfPlot.objects.filter(run_id=run_id, name=name).first()
    if plot is None:
        raise Http404("No such plot.")
    response = HttpResponse(bytes(plot.png), content_type="image/png")
    response["Cache-Control"] = "private, max-age=3600"
    return response


@require_POST
@admin_only
def whatif_apply_view(request: HttpRequest, run_id: int) -> HttpResponse:
    _run(run_id)
    try:
        whatif_apply(actor=caller(request), run_id=run_id)
    except WhatIfError as exc:
        messages.error(request, f"Not applied: {exc}.")
    else:
        messages.success(request, "Proposal applied: the next round uses it. The audit log has each change.")
    return redirect("frontend:console_whatif_run", run_id=run_id)


@require_POST
@admin_only
def whatif_propose_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """The form's nonce is the idempotency key: a resent form saves one version."""
    run = _run(run_id)
    reason = request.POST.get("reason", "")
    nonce = request.POST.get("nonce", "")[:64]
    try:
        version = whatif_propose(
            actor=request.user,  # type: ignore[arg-type]  # request.user: User | AnonymousUser; admin_only leaves a staff User
            run_id=run.pk,
            reason=reason,
            key=f"console-whatif:{nonce}" if nonce else None,
        )
    except WhatIfError as exc:
        return _run_page(request, run, {"form": str(exc)}, reason)
    except PolicyError as exc:
        # The form has one field, the reason; the proposal's own refusals (a tenant gone since the run) are
        # shown with the path they name.
        shown = {"reason": exc.message} if exc.field == "reason" else {"form": f"{exc.field}: {exc.message}"}
        return _run_page(request, run, shown, reason)
    messages.success(
        request, f"Saved as proposed version {version.number}: run it in shadow, then as a canary, from here."
    )
    return redirect("frontend:console_version", number=version.number)
