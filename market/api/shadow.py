"""Shadow rounds API (docs/rounds.md §Shadow rounds), platform admins only: start and stop a proposed version's
shadow, its accumulated differences, and its rounds in shadow round by round."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import caller, require_admin
from config.api import Pagination, no_body
from config.errors import PolicyError
from market.api.errors import api_exception
from market.models import PolicyVersion, ShadowRun
from market.selectors.shadow import (
    compliance,
    shadow_round_view,
    shadow_rounds,
    shadow_run_open,
    shadow_runs,
    shadow_totals,
)
from market.selectors.shadow_diff import SUMMARY_KEYS
from market.services.shadow import shadow_start, shadow_stop


class ShadowRunSerializer(serializers.ModelSerializer[ShadowRun]):
    version = serializers.IntegerField(
        source="version.number", read_only=True, help_text="The version's number."
    )
    started_by = serializers.CharField(source="started_by.username", default=None, read_only=True)
    stopped_by = serializers.CharField(source="stopped_by.username", default=None, read_only=True)

    class Meta:
        model = ShadowRun
        fields = ["id", "version", "started_at", "started_by", "stopped_at", "stopped_by"]
        read_only_fields = fields


class ShadowRoundSerializer(serializers.Serializer[object]):
    """One live round cleared again under the version (market.selectors.shadow.shadow_round_view)."""

    round = serializers.IntegerField()
    slot = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    clear_ms = serializers.IntegerField(help_text="The shadow's own clearing time.")
    prices = serializers.DictField(
        child=serializers.DictField(),
        help_text="Per GPU type: posted_live, posted_proposed, spot_live, spot_proposed.",
    )
    tenants = serializers.DictField(
        child=serializers.DictField(),
        help_text="Per tenant slug where something differed: its figures on both sides.",
    )

    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]  # any DRF field
        fields = super().get_fields()
        for key in SUMMARY_KEYS:
            fields[key] = serializers.IntegerField()
        return fields


ShadowSummarySerializer = inline_serializer(
    "ShadowSummary",
    fields={
        "version": serializers.IntegerField(),
        "running": serializers.BooleanField(),
        "runs": ShadowRunSerializer(many=True),
        "totals": serializers.DictField(
            help_text="Sums over the version's shadow rounds (rounds, clear_ms, ...)."
        ),
        "compliance": serializers.DictField(
            help_text="Fair-share compliance, live and proposed (null: nobody waited)."
        ),
        "tenants": serializers.DictField(child=serializers.DictField(), help_text="Per tenant slug, summed."),
        "prices": serializers.DictField(child=serializers.DictField(), help_text="Per GPU type."),
    },
)


def _version(request: Request, number: int) -> PolicyVersion:
    require_admin(caller(request))
    version = PolicyVersion.objects.filter(number=number).first()
    if version is None:
        raise exceptions.NotFound("No such policy version.")
    return version


def _summary(version: PolicyVersion) -> dict[str, Any]:
    totals = shadow_totals(version=version)
    s = totals.summary
    return {
        "version": version.number,
        "running": shadow_run_open(version=version) is not None,
        "runs": ShadowRunSerializer(shadow_runs(version=version)[:20], many=True).data,
        "totals": s,
        "compliance": {
            "live": compliance(s["fair_complied_live"], s["fair_counted_live"]),
            "proposed": compliance(s["fair_complied_proposed"], s["fair_counted_proposed"]),
        },
        "tenants": totals.tenants,
        "prices": totals.prices,
    }


class ShadowView(APIView):
    @extend_schema(
        responses=ShadowSummarySerializer, summary="A version's shadow: runs and accumulated differences"
    )
    def get(self, request: Request, number: int) -> Response:
        return Response(_summary(_version(request, number)))


class ShadowStartView(APIView):
    @extend_schema(
        request=None, responses={201: ShadowRunSerializer}, summary="Run a proposed version in shadow"
    )
    def post(self, request: Request, number: int) -> Response:
        version = _version(request, number)
        no_body(request)
        try:
            run = shadow_start(actor=caller(request), version=version)
        except PolicyError as exc:
            raise api_exception(exc) from exc
        return Response(ShadowRunSerializer(run).data, status=status.HTTP_201_CREATED)


class ShadowStopView(APIView):
    @extend_schema(request=None, responses=ShadowRunSerializer, summary="Stop a version's shadow")
    def post(self, request: Request, number: int) -> Response:
        version = _version(request, number)
        no_body(request)
        try:
            run = shadow_stop(actor=caller(request), version=version)
        except PolicyError as exc:
            raise api_exception(exc) from exc
        return Response(ShadowRunSerializer(run).data)


class ShadowRoundsView(APIView):
    pagination_class = Pagination

    @extend_schema(
        responses=ShadowRoundSerializer(many=True),
        summary="A version's rounds in shadow, newest first (paginated)",
    )
    def get(self, request: Request, number: int) -> Response:
        version = _version(request, number)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(shadow_rounds(version=version), request, view=self)
        rows = [shadow_round_view(row) for row in page or []]
        return paginator.get_paginated_response(ShadowRoundSerializer(rows, many=True).data)
