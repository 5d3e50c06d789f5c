"""Spend API: what a team was charged per day and GPU type (the portal's spend chart, as data)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller
from config.api import QuerySerializer
from config.money import format_credits
from market.selectors.spend import spend_by_day, spend_entries

SPEND_MAX_DAYS = 366


class SpendFilterSerializer(QuerySerializer):
    days = serializers.IntegerField(
        min_value=1,
        max_value=SPEND_MAX_DAYS,
        default=30,
        help_text="Days back from today (UTC), today included.",
    )


class SpendDaySerializer(serializers.Serializer[object]):
    day = serializers.DateField()
    gpu_type = serializers.CharField(help_text='The GPU type charged; "—" for refunds not tied to one.')
    charged = serializers.IntegerField(help_text="Micro-credits charged (refunds subtract).")
    charged_credits = serializers.CharField()


class SpendSerializer(serializers.Serializer[object]):
    since = serializers.DateField(help_text="The first day counted.")
    days = SpendDaySerializer(many=True, help_text="Oldest day first; days without charges are left out.")
    total = serializers.IntegerField(help_text="Micro-credits charged over the period.")
    total_credits = serializers.CharField()


class SpendView(APIView):
    @extend_schema(
        parameters=[SpendFilterSerializer],
        responses=SpendSerializer,
        summary="The tenant's charges per day and GPU type",
    )
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        query = SpendFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        since = today - timedelta(days=query.validated_data["days"] - 1)
        by_type = spend_by_day(spend_entries(tenant=tenant, since=since), by="gpu_type_name")
        rows = sorted(
            (day.date(), gpu_type, total) for gpu_type, series in by_type.items() for day, total in series
        )
        total = sum(r[2] for r in rows)
        data = {
            "since": since.date(),
            "days": [
                {"day": d, "gpu_type": t, "charged": c, "charged_credits": format_credits(c)}
                for d, t, c in rows
            ],
            "total": total,
            "total_credits": format_credits(total),
        }
        return Response(SpendSerializer(data).data)
