"""Jobs API: submit (idempotent), list, detail, amend the bid, cancel. Views parse, call, serialize."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller
from accounts.models import ApiToken, Tenant
from config.api import Pagination, no_body
from config.errors import PolicyError
from config.idempotency import IdempotencyKeyReused, header_key, key_header, request_digest
from market.api.errors import api_exception
from market.api.jobs_serializers import (
    BidAmendSerializer,
    JobDetailSerializer,
    JobFilterSerializer,
    JobListItemSerializer,
    JobSerializer,
    JobSubmitSerializer,
)
from market.models import TERMINAL_STATES, Job
from market.selectors.job_estimate import job_estimate
from market.selectors.job_notes import job_notes
from market.selectors.jobs import gpu_types_by_name, job_detail, job_list, tenant_jobs
from market.services import jobs as services


def _render(
    job: Job,
    serializer: type[JobSerializer] = JobSerializer,
    gpu_types: dict[str, Any] | None = None,
    *,
    admin: bool = False,
) -> dict[str, Any]:
    """`admin`: the viewer is a platform admin (a lease's preemption then names whom it was for)."""
    types = gpu_types if gpu_types is not None else gpu_types_by_name()
    return dict(serializer(job, context={"gpu_types": types, "admin": admin}).data)


def _idempotency_key(request: Request) -> str:
    try:
        return header_key(request.headers)
    except PolicyError as exc:
        raise api_exception(exc) from exc


def _first_response(job: Job) -> dict[str, Any]:
    """What the job's first submit answered, keys in the order it had (jsonb keeps no key order), so a
    replay's body is byte for byte the first one. A job submitted without a stored response: as it is now."""
    now = _render(job)
    return _in_order(job.first_response, now) if job.first_response else now


def _in_order(stored: Any, shape: Any) -> Any:
    if isinstance(stored, dict) and isinstance(shape, dict):
        keys = [k for k in shape if k in stored] + [k for k in stored if k not in shape]
        return {k: _in_order(stored[k], shape.get(k)) for k in keys}
    if isinstance(stored, list) and isinstance(shape, list) and shape:
        return [_in_order(item, shape[0]) for item in stored]
    return stored


def submit_args(data: Any, *, form: bool = False) -> dict[str, Any]:
    """A submit body checked by JobSubmitSerializer, as job_submit's arguments (the portal's form uses it
    too, with form=True as its values are text, so both doors give the same errors); raises the
    serializer's ValidationError."""
    body = JobSubmitSerializer(data=data, context={"form": form})
    body.is_valid(raise_exception=True)
    v = body.validated_data
    return {
        "name": v["name"],
        "command": v["command"],
        "gpus": v["gpus"],
        "bids": v["bids"],
        "max_seconds": v["max_hours"],  # HoursField gives whole seconds
        "grace_seconds": v.get("grace_seconds"),
        "cpus_per_gpu": v.get("cpus_per_gpu"),
        "memory_gb_per_gpu": v.get("memory_gb_per_gpu"),
    }


def _job(tenant: Tenant, job_id: int) -> Job:
    return get_object_or_404(tenant_jobs(tenant=tenant), pk=job_id)


_IDEMPOTENCY_HEADER = key_header(
    "Repeating a submit with the same key and body returns the first response; the same key with another "
    "body is refused (409 idempotency_key_reused)."
)


class JobListView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[JobFilterSerializer],
        responses=JobListItemSerializer(many=True),
        summary="The tenant's jobs, newest first (paginated), each with its tier, node and why it waits",
    )
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        query = JobFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        f = query.validated_data
        qs = job_list(
            tenant=tenant, states=f.get("state", ()), gpu_type=f.get("gpu_type"), submitter=f.get("submitter")
        )
        paginator = Pagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        context = {"gpu_types": gpu_types_by_name(), "notes": job_notes(page or [])}
        data = JobListItemSerializer(page, many=True, context=context).data
        return paginator.get_paginated_response(data)

    @extend_schema(
        request=JobSubmitSerializer,
        parameters=[_IDEMPOTENCY_HEADER],
        responses={
            201: OpenApiResponse(JobSerializer, description="Submitted, or the first response to this key."),
            409: OpenApiResponse(description="idempotency_key_reused: the key was used with another body."),
        },
        summary="Submit a job with its bid",
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        key = _idempotency_key(request)
        digest = request_digest(request.data) if key else ""
        try:
            args = submit_args(request.data)
            # The bid's types are all the response shows, and validation has already loaded them.
            types = {t.name: t for t, _ in args["bids"]}
            job, created = services.job_submit(
                tenant=tenant,
                submitter=caller(request),
                idempotency_key=key,
                request_digest=digest,
                first_response=lambda job: _render(job, gpu_types=types),
                # A repeated key that passes the checks meets the unique index and is re-read; one they
                # refuse is looked up below. No lookup on the way of a new submit.
                replay_checked=True,
                # A token is for one tenant (access_tenant checked it is this one) and its
                # authentication already proved the user a member: no need to ask again.
                member_checked=isinstance(request.auth, ApiToken),
                **args,
            )
        except (services.JobError, PolicyError, serializers.ValidationError) as exc:
            # A replay gets what the first submit got, even if its body would not pass the checks today.
            replayed = _replay(tenant, key, digest)
            if replayed is None:
                raise api_exception(exc) if not isinstance(exc, serializers.ValidationError) else exc from exc
            job, created = replayed, False
        if not created:  # a replay, or a concurrent submit with this key got there first
            return Response(_first_response(job), status=status.HTTP_201_CREATED)
        return Response(job.first_response or _render(job, gpu_types=types), status=status.HTTP_201_CREATED)


def _replay(tenant: Tenant, key: str, digest: str) -> Job | None:
    try:
        return services.job_replay(tenant=tenant, idempotency_key=key, request_digest=digest)
    except IdempotencyKeyReused as exc:  # the key was used for another body
        raise api_exception(exc) from exc


class JobDetailView(APIView):
    @extend_schema(
        responses=JobDetailSerializer,
        summary="One job: current bid, bid history, round outcomes (latest 100), leases and charges",
    )
    def get(self, request: Request, slug: str, job_id: int) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        job = job_detail(tenant=tenant, job_id=job_id)
        if job is None:
            raise Http404("No such job.")
        job.estimate = None if job.state in TERMINAL_STATES else job_estimate(job=job)  # type: ignore[attr-defined]  # an attribute the view adds for the serializer
        return Response(_render(job, JobDetailSerializer, admin=caller(request).is_staff))


class BidAmendView(APIView):
    @extend_schema(
        request=BidAmendSerializer,
        responses={
            200: JobSerializer,
            403: OpenApiResponse(description="Neither the submitter, a manager of the tenant nor an admin."),
            409: OpenApiResponse(description="job_not_pending: only a pending job's bid can change."),
        },
        summary="Replace a pending job's bid (a new version; earlier ones are kept)",
    )
    def post(self, request: Request, slug: str, job_id: int) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        job = _job(tenant, job_id)
        body = BidAmendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = services.bid_amend(job=job, actor=caller(request), bids=body.validated_data["bids"])
        except (services.JobError, PolicyError) as exc:
            raise api_exception(exc) from exc
        return Response(_render(job))


class JobCancelView(APIView):
    @extend_schema(
        request=None,
        responses={
            200: JobSerializer,
            403: OpenApiResponse(description="Neither the submitter, a manager of the tenant nor an admin."),
            409: OpenApiResponse(description="job_finished: the job already completed, failed or expired."),
        },
        summary="Cancel a job: at once while pending, else its leases are stopped and settled",
    )
    def post(self, request: Request, slug: str, job_id: int) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        job = _job(tenant, job_id)
        no_body(request)
        try:
            job = services.job_cancel(job=job, actor=caller(request))
        except services.JobError as exc:
            raise api_exception(exc) from exc
        return Response(_render(job))
