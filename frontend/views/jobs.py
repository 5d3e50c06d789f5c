"""Jobs: list with filters, submit with guidance, detail with outcomes explained, amend, cancel."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST
from rest_framework import serializers

from accounts.access import caller, owner_or_manager
from config.errors import PolicyError
from config.idempotency import form_digest_before_issue_26, request_digest
from config.money import AmountError, parse_credits
from frontend.access import Seat, page, seat
from frontend.charts import Series, line_chart
from frontend.forms import BidRow, bid_rows, bids_payload, flatten, place_bid_errors, unplaced_to_form
from frontend.speed_cells import speed_cells
from inventory.models import GpuType
from market.api.errors import form_errors
from market.api.jobs import submit_args
from market.api.jobs_serializers import BidAmendSerializer, hours_text
from market.models import TERMINAL_STATES, Job, JobState, Lease
from market.selectors.explain import explain_outcomes, lease_end_sentence, queue_places
from market.selectors.guidance import bid_guidance
from market.selectors.holds import hold_notice
from market.selectors.job_estimate import Estimate, draft_estimate, job_estimate, max_hours_warning
from market.selectors.jobs import job_detail, job_list, tenant_jobs
from market.selectors.lease_parts import lease_part_views
from market.selectors.prices import price_board
from market.selectors.reservations import job_placement
from market.selectors.spend_alerts import Block, bid_block
from market.selectors.usage import UsagePoint, job_log_tail, lease_usage_series, usage_combined
from market.services import jobs as services

PAGE_SIZE = 25


@login_required
def jobs(request: HttpRequest, slug: str) -> HttpResponse:
    s = seat(request, slug)
    types = list(GpuType.objects.order_by("name").values_list("name", flat=True))
    state = request.GET.get("state", "")
    gpu_type = request.GET.get("gpu_type", "")
    qs = job_list(
        tenant=s.tenant,
        states=[state] if state in JobState.values else (),
        gpu_type=gpu_type if gpu_type in types else None,
    )
    paged = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = urlencode([(k, v) for k, v in (("state", state), ("gpu_type", gpu_type)) if v])
    return page(
        request,
        "frontend/jobs.html",
        {
            "page": paged,
            "states": JobState.choices,
            "types": types,
            "state": state,
            "gpu_type": gpu_type,
            "query": query,
        },
        s,
    )


def _submit(s: Seat, request: HttpRequest, key: str, body: dict[str, Any]) -> Job:
    """job_submit with the API's checks and digest (config/idempotency.request_digest). A key refused as
    reused is looked up once more under the digest the form stored before issue 26, so a form posted before
    that change and again after it replays instead of being refused."""
    try:
        return services.job_submit(
            tenant=s.tenant,
            submitter=caller(request),
            idempotency_key=key,
            request_digest=request_digest(body),
            **submit_args(body, form=True),
        )[0]
    except services.IdempotencyKeyReused as exc:
        # Raises the same IdempotencyKeyReused (the same message) when the old digest differs too.
        job = services.job_replay(
            tenant=s.tenant, idempotency_key=key, request_digest=form_digest_before_issue_26(body)
        )
        if job is None:  # the job went (retention) between the two reads: the refusal stands
            raise exc from None
        return job


@login_required
def submit(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: the form. POST: the API's checks, then job_submit; the hidden nonce is the idempotency key, so
    a double click or a resent form makes one job."""
    s = seat(request, slug)
    types = list(GpuType.objects.order_by("name"))
    errors: dict[str, str] = {}
    data = request.POST if request.method == "POST" else None
    rows = bid_rows(data, types)
    values = {
        "name": request.POST.get("name", ""),
        "command": request.POST.get("command", ""),
        "gpus": request.POST.get("gpus", "1"),
        "max_hours": request.POST.get("max_hours", "1"),
        "grace_seconds": request.POST.get("grace_seconds", ""),
        "nonce": request.POST.get("nonce") or uuid.uuid4().hex,
    }
    if data is not None:
        posted = [r.index for r in rows if r.gpu_type or r.limit.strip()]
        body: dict[str, Any] = {k: values[k] for k in ("name", "command", "gpus")}
        body["max_hours"] = values["max_hours"].strip()
        body["bids"] = bids_payload(rows)
        if values["grace_seconds"].strip():
            body["grace_seconds"] = values["grace_seconds"].strip()
        try:
            job = _submit(s, request, f"portal:{values['nonce'][:64]}", body)
        except serializers.ValidationError as exc:
            errors = flatten(exc.detail)
        except (PolicyError, services.JobError) as exc:
            errors = form_errors(exc)
        else:
            messages.success(request, f"Job {job.pk} submitted; it takes part in the next round.")
            return redirect("frontend:job", slug=s.tenant.slug, job_id=job.pk)
        place_bid_errors(rows, errors, posted)
        unplaced_to_form(errors, {"name", "command", "gpus", "max_hours", "grace_seconds"})
    return page(
        request,
        "frontend/submit.html",
        {
            "types": types,
            "rows": rows,
            "values": values,
            "errors": errors,
            "board": price_board(),
            "guidance": _guidance(s, types, rows, values["gpus"]),
            # A paused team sees why before it fills the form in (a cap depends on the bid: said on submit).
            "paused": _paused(s),
        },
        s,
    )


def _paused(s: Seat) -> Block | None:
    block = bid_block(tenant=s.tenant, cost=0)
    return block if block is not None and block.paused else None


def _guidance(s: Any, types: list[GpuType], rows: list[BidRow], gpus: str) -> list[Any]:
    by_name = {t.name: t for t in types}
    try:
        count = max(int(gpus), 1)
    except ValueError:
        count = 1
    out = []
    for row in rows:
        gpu_type = by_name.get(row.gpu_type)
        if gpu_type is None:
            continue
        try:
            limit: int | None = parse_credits(row.limit) if row.limit.strip() else None
        except AmountError:
            limit = None
        out.append(bid_guidance(tenant=s.tenant, gpu_type=gpu_type, limit=limit, gpus=count))
    if not out:  # nothing chosen yet: what each type gives at its posted price
        out = [bid_guidance(tenant=s.tenant, gpu_type=t, limit=t.current_posted, gpus=count) for t in types]
    return out


@login_required
def guidance(request: HttpRequest, slug: str) -> HttpResponse:
    """The guidance fragment for the submit form's current inputs (fetched by site.js as they change)."""
    s = seat(request, slug)
    types = list(GpuType.objects.order_by("name"))
    rows = bid_rows(request.GET, types)
    return render(
        request,
        "frontend/_guidance.html",
        {"guidance": _guidance(s, types, rows, request.GET.get("gpus", "1"))},
    )


ESTIMATE_MAX_GPUS = 4096
ESTIMATE_MAX_CHARS = 8192


def _draft_limits(types: list[GpuType], rows: list[BidRow]) -> list[tuple[GpuType, int]]:
    """The typed bid rows that parse (a half-typed limit is skipped, not an error: the user is typing); with
    none typed, every type at its posted price."""
    by_name = {t.name: t for t in types}
    out = []
    for row in rows:
        gpu_type = by_name.get(row.gpu_type)
        try:
            limit = parse_credits(row.limit) if gpu_type is not None and row.limit.strip() else None
        except AmountError:
            limit = None
        if gpu_type is not None and limit is not None:
            out.append((gpu_type, limit))
    return out or [(t, t.current_posted) for t in types]


def _estimate_json(found: Estimate) -> dict[str, Any]:
    got = found.runtime.prediction
    return {
        "prediction": None
        if got is None
        else {
            "median_seconds": got.median_s,
            "p90_seconds": got.p90_s,
            "basis_jobs": got.basis,
            "match": got.level_name,
        },
        "prediction_text": found.runtime.text,
        "cost": found.cost,
        "cost_text": found.cost_text,
        "starts": [
            {"gpu_type": e.gpu_type, "at": e.at.isoformat() if e.at else None, "text": e.text}
            for e in found.starts
        ],
        "speeds": None if found.speeds is None else speed_cells(found.speeds),
    }


@login_required
def estimate(request: HttpRequest, slug: str) -> JsonResponse:
    """The submit form's prediction as the user types (site.js asks as the inputs change): JSON, so the
    page shows it without a reload. Bad input is a 400 naming the field."""
    s = seat(request, slug)
    types = list(GpuType.objects.order_by("name"))
    name, command = request.GET.get("name", ""), request.GET.get("command", "")
    if len(name) > ESTIMATE_MAX_CHARS or len(command) > ESTIMATE_MAX_CHARS:
        return JsonResponse({"errors": {"command": "too long"}}, status=400)
    try:
        gpus = int(request.GET.get("gpus", "1"))
    except ValueError:
        return JsonResponse({"errors": {"gpus": "must be a whole number"}}, status=400)
    if not 1 <= gpus <= ESTIMATE_MAX_GPUS:
        return JsonResponse({"errors": {"gpus": f"must be between 1 and {ESTIMATE_MAX_GPUS}"}}, status=400)
    limits = _draft_limits(types, bid_rows(request.GET, types))
    found = draft_estimate(tenant=s.tenant, name=name, command=command, gpus=gpus, limits=limits)
    return JsonResponse(
        {**_estimate_json(found), "warning": _max_hours_warning(found, request.GET.get("max_hours"))}
    )


def _max_hours_warning(found: Estimate, max_hours: str | None) -> str:
    try:
        hours = float(max_hours or "")
    except ValueError:
        return ""
    return max_hours_warning(found, hours, max_hours)


@login_required
def job(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    s = seat(request, slug)
    found = job_detail(tenant=s.tenant, job_id=job_id)
    if found is None:
        raise Http404("No such job.")
    return _job_page(request, s, found, None, {})


LEASE_CHARTS = 3  # the newest leases that reported usage get charts; older ones their summary only


def _usage_charts(lease: Lease) -> list[SafeString]:
    """Utilisation, memory and energy of one lease over time, one line per node of it."""
    series = lease_usage_series(lease=lease)
    if not series:
        return []

    def lines(value: Callable[[UsagePoint], float]) -> list[Series]:
        return [
            Series(node, [(p.at.timestamp(), value(p)) for p in points]) for node, points in series.items()
        ]

    width, height = 420, 180
    # GiB for what real jobs use; MB when it all stays under one GiB, so the axis does not read 0.01.
    big = any(p.mem_used_mb >= 1024 for points in series.values() for p in points)
    scale, unit = (1024, "GiB") if big else (1, "MB")
    return [
        line_chart(
            lines(lambda p: p.util_pct),
            title=f"Lease {lease.pk}: GPU utilisation",
            y_unit="%",
            width=width,
            height=height,
        ),
        line_chart(
            lines(lambda p: round(p.mem_used_mb / scale, 2)),
            title=f"Lease {lease.pk}: GPU memory used",
            y_unit=unit,
            width=width,
            height=height,
        ),
        line_chart(
            lines(lambda p: round(p.energy_j / 3600, 2)),
            title=f"Lease {lease.pk}: energy used",
            y_unit="Wh",
            width=width,
            height=height,
        ),
    ]


def _lease_panels(leases: list[Lease], *, admin: bool) -> list[dict[str, Any]]:
    """Per lease (newest first): what the agents measured, its charts, and why it ended (or is being
    preempted; `admin`: a platform admin also learns whom a preemption was for)."""
    panels = []
    charted = 0
    for lease in reversed(leases):
        usage = usage_combined(lease.usage_rows) if lease.usage_rows else None  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
        exit_code = next((u.exit_code for u in lease.usage_rows if u.exit_code is not None), None)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
        exit_reason = next((u.exit_reason for u in lease.usage_rows if u.exit_reason), "")  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
        charts: list[SafeString] = []
        if usage is not None and charted < LEASE_CHARTS:
            charts, charted = _usage_charts(lease), charted + 1
        panels.append(
            {
                "lease": lease,
                "usage": usage,
                "charts": charts,
                "parts": lease_part_views(lease),
                "ended": lease_end_sentence(
                    lease,
                    gpu_seconds=usage.gpu_seconds if usage else 0.0,
                    exit_code=exit_code,
                    admin=admin,
                    exit_reason=exit_reason,
                ),
            }
        )
    return panels


def _job_page(
    request: HttpRequest, s: Any, found: Any, rows: list[BidRow] | None, errors: dict[str, str]
) -> HttpResponse:
    types = list(GpuType.objects.order_by("name"))
    user = caller(request)
    may_change = owner_or_manager(
        user,
        owner_id=found.submitter_id,
        tenant=s.tenant,
        manages=s.manages,
    )
    estimated = None if found.state in TERMINAL_STATES else job_estimate(job=found)
    return page(
        request,
        "frontend/job.html",
        {
            "job": found,
            "max_hours": hours_text(found.max_seconds),
            "explained": explain_outcomes(found, found.latest_outcomes, found.history),
            "queue": queue_places(found),
            "placement": job_placement(found),
            "estimate": estimated,
            "speed_table": speed_cells(estimated.speeds) if estimated and estimated.speeds else None,
            "hold_notice": hold_notice(found.lease_rows),
            "panels": _lease_panels(found.lease_rows, admin=user.is_staff),
            "log_tail": job_log_tail(found.lease_rows),
            "types": types,
            "rows": rows if rows is not None else bid_rows(None, types, found.limits),
            "errors": errors,
            "may_change": may_change,
            "pending": found.state == JobState.PENDING,
            "cancellable": may_change
            and found.state not in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED)
            and found.cancel_requested_at is None,
        },
        s,
    )


@login_required
@require_POST
def amend(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    s = seat(request, slug)
    found = tenant_jobs(tenant=s.tenant).filter(pk=job_id).first()
    if found is None:
        raise Http404("No such job.")
    types = list(GpuType.objects.order_by("name"))
    rows = bid_rows(request.POST, types)
    posted = [r.index for r in rows if r.gpu_type or r.limit.strip()]
    errors: dict[str, str] = {}
    try:
        body = BidAmendSerializer(data={"bids": bids_payload(rows)})
        body.is_valid(raise_exception=True)
        services.bid_amend(job=found, actor=caller(request), bids=body.validated_data["bids"])
    except serializers.ValidationError as exc:
        errors = flatten(exc.detail)
    except (PolicyError, services.JobError) as exc:
        errors = form_errors(exc)
    if not errors:
        messages.success(request, f"Bid of job {found.pk} amended; the next round uses it.")
        return redirect("frontend:job", slug=s.tenant.slug, job_id=found.pk)
    place_bid_errors(rows, errors, posted)
    detail = job_detail(tenant=s.tenant, job_id=job_id)
    response = _job_page(request, s, detail, rows, errors)
    response.status_code = 400
    return response


@login_required
@require_POST
def cancel(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    s = seat(request, slug)
    found = tenant_jobs(tenant=s.tenant).filter(pk=job_id).first()
    if found is None:
        raise Http404("No such job.")
    try:
        services.job_cancel(job=found, actor=caller(request))
    except services.JobError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {found.pk} cancelled.")
    return redirect("frontend:job", slug=s.tenant.slug, job_id=found.pk)
