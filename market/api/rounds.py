"""Rounds API: what each auction round did, market-wide (no tenant's outcomes). Anyone signed in reads it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api import Pagination, QuerySerializer
from market.api.prices import RoundPriceSerializer
from market.models import Round, RoundState
from market.selectors.rounds import round_get, rounds_list


class RoundSerializer(serializers.ModelSerializer[Round]):
    prices = RoundPriceSerializer(many=True, read_only=True)

    class Meta:
        model = Round
        fields = [
            "id",
            "state",
            "slot",
            "period_s",
            "created_at",
            "frozen_at",
            "cleared_at",
            "committed_at",
            "dispatched_at",
            "bids",
            "winners",
            "losers",
            "preemptions",
            "skipped",
            "gpus_free",
            "gpus_allocated",
            "counters",
            "clear_ms",
            "commit_ms",
            "digest",
            "attempts",
            "error",
            "prices",
        ]
        read_only_fields = fields


class RoundFilterSerializer(QuerySerializer):
    state = serializers.ChoiceField(choices=RoundState.choices, required=False)


class RoundListView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[RoundFilterSerializer],
        responses=RoundSerializer(many=True),
        summary="Auction rounds, newest first, with their figures and prices (paginated)",
    )
    def get(self, request: Request) -> Response:
        query = RoundFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rounds_list(**query.validated_data), request, view=self)
        return paginator.get_paginated_response(RoundSerializer(page, many=True).data)


class RoundDetailView(APIView):
    @extend_schema(responses=RoundSerializer, summary="One auction round")
    def get(self, request: Request, round_id: int) -> Response:
        found = round_get(round_id=round_id)
        if found is None:
            raise exceptions.NotFound("No such round.")
        return Response(RoundSerializer(found).data)
