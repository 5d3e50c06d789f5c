"""Prices API: each GPU type's prices now, and what past rounds published. Anyone signed in reads them.

Prices are micro-credits per GPU-hour, each with a `*_credits` string alongside (like the ledger API).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import Pagination, QuerySerializer
from config.fields import InstantField
from inventory.models import GpuType
from market.api.ledger_serializers import CreditsField
from market.models import RoundPrice
from market.selectors.prices import price_board, price_history


class PriceBoardSerializer(serializers.Serializer[object]):
    gpu_type = serializers.CharField()
    reserve = serializers.IntegerField(help_text="Reserve price r: the lowest a bid may be to win.")
    reserve_credits = CreditsField(source="reserve", read_only=True)
    posted = serializers.IntegerField(help_text="Posted price p the next round starts from (tier B pays it).")
    posted_credits = CreditsField(source="posted", read_only=True)
    max = serializers.IntegerField(help_text="Highest the posted price may go.")
    max_credits = CreditsField(source="max", read_only=True)
    spot = serializers.IntegerField(allow_null=True, help_text="The last round's spot price; null if none.")
    spot_credits = CreditsField(source="spot", read_only=True, allow_null=True)
    last_round = serializers.IntegerField(source="last_round_id", allow_null=True)
    last_round_at = serializers.DateTimeField(allow_null=True, help_text="The last round's slot.")


class RoundPriceSerializer(serializers.ModelSerializer[RoundPrice]):
    """What one round published for one GPU type; `next_posted` is where the posted price went next."""

    gpu_type = serializers.CharField(source="gpu_type.name", read_only=True)
    reserve_credits = CreditsField(source="reserve", read_only=True)
    posted_credits = CreditsField(source="posted", read_only=True)
    spot_credits = CreditsField(source="spot", read_only=True, allow_null=True)
    next_posted_credits = CreditsField(source="next_posted", read_only=True)

    class Meta:
        model = RoundPrice
        fields = [
            "gpu_type",
            "reserve",
            "reserve_credits",
            "posted",
            "posted_credits",
            "spot",
            "spot_credits",
            "next_posted",
            "next_posted_credits",
        ]
        read_only_fields = fields


class PriceHistorySerializer(RoundPriceSerializer):
    round_at = serializers.DateTimeField(source="round.slot", read_only=True, help_text="The round's slot.")

    class Meta(RoundPriceSerializer.Meta):
        fields = ["round", "round_at", *RoundPriceSerializer.Meta.fields]
        read_only_fields = fields


class PriceHistoryFilterSerializer(QuerySerializer):
    gpu_type = serializers.SlugRelatedField(
        slug_field="name", queryset=GpuType.objects.all(), required=False, help_text="A GPU type's name."
    )
    since = InstantField(required=False, help_text="Rounds whose slot is at or after this date/datetime.")
    until = InstantField(
        required=False, end_of_day=True, help_text="Rounds up to this datetime, or through this whole date."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "since" in attrs and "until" in attrs and attrs["until"] <= attrs["since"]:
            raise serializers.ValidationError({"until": "must be after since"})
        return attrs


class PriceBoardView(APIView):
    @extend_schema(
        responses=PriceBoardSerializer(many=True),
        summary="Every GPU type's reserve, posted and maximum price, and the last round's spot price",
    )
    def get(self, request: Request) -> Response:
        return Response(PriceBoardSerializer(price_board(), many=True).data)


class PriceHistoryView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[PriceHistoryFilterSerializer],
        responses=PriceHistorySerializer(many=True),
        summary="Prices each round published, newest round first (paginated)",
    )
    def get(self, request: Request) -> Response:
        query = PriceHistoryFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        f = query.validated_data
        qs = price_history(gpu_type=f.get("gpu_type"), since=f.get("since"), before=f.get("until"))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(PriceHistorySerializer(page, many=True).data)
