"""GPU types API: everyone signed in reads them; platform admins create and change them."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import caller, require_admin
from config.api import BodySerializer, Pagination
from config.errors import PolicyError
from config.fields import TextField
from config.money import format_credits
from inventory.models import GpuType
from market.api.errors import api_exception
from market.api.ledger_serializers import CreditsField
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.policy_versions import REASON_MAX


class GpuTypeSerializer(serializers.ModelSerializer[GpuType]):
    reserve_price_credits = serializers.SerializerMethodField()
    max_price_credits = serializers.SerializerMethodField()

    class Meta:
        model = GpuType
        fields = [
            "name",
            "memory_gb",
            "reserve_price",
            "max_price",
            "reserve_price_credits",
            "max_price_credits",
        ]
        read_only_fields = fields

    def get_reserve_price_credits(self, obj: GpuType) -> str:
        return format_credits(obj.reserve_price)

    def get_max_price_credits(self, obj: GpuType) -> str:
        return format_credits(obj.max_price)


class GpuTypeWriteSerializer(BodySerializer):
    """Prices in credits per GPU-hour, as decimal strings."""

    name = TextField(
        pattern="[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
        pattern_message="must be a letter or digit, then up to 63 letters, digits, dots, dashes or underscores",
        max_length=64,
    )
    memory_gb = serializers.IntegerField(min_value=1, max_value=100_000)
    reserve_price = CreditsField(allow_zero=True)
    max_price = CreditsField()
    reason = TextField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="Why: kept with the policy version.",
    )


def _save(request: Request, data: dict[str, Any]) -> GpuType:
    body = GpuTypeWriteSerializer(data=data)
    body.is_valid(raise_exception=True)
    try:
        return gpu_type_policy_save(actor=caller(request), **body.validated_data)
    except PolicyError as exc:
        raise api_exception(exc) from exc


class GpuTypeListView(APIView):
    pagination_class = Pagination

    @extend_schema(responses=GpuTypeSerializer(many=True), summary="GPU types and their price bounds")
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(GpuType.objects.all(), request, view=self)
        return paginator.get_paginated_response(GpuTypeSerializer(page, many=True).data)

    @extend_schema(
        request=GpuTypeWriteSerializer, responses={201: GpuTypeSerializer}, summary="Add a GPU type"
    )
    def post(self, request: Request) -> Response:
        require_admin(caller(request))
        if GpuType.objects.filter(name=request.data.get("name")).exists():
            raise serializers.ValidationError(
                {"name": ["a GPU type with this name exists; PUT to change it"]}
            )
        return Response(GpuTypeSerializer(_save(request, request.data)).data, status=status.HTTP_201_CREATED)


class GpuTypeDetailView(APIView):
    @extend_schema(responses=GpuTypeSerializer, summary="One GPU type")
    def get(self, request: Request, name: str) -> Response:
        return Response(GpuTypeSerializer(get_object_or_404(GpuType, name=name)).data)

    @extend_schema(request=GpuTypeWriteSerializer, responses=GpuTypeSerializer, summary="Change a GPU type")
    def put(self, request: Request, name: str) -> Response:
        require_admin(caller(request))
        get_object_or_404(GpuType, name=name)
        data = {**request.data, "name": name} if isinstance(request.data, dict) else request.data
        return Response(GpuTypeSerializer(_save(request, data)).data)
