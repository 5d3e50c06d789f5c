"""Ledger API: balance, entries, top-ups and refunds. Views parse, call a selector or service, serialize."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller, require_admin
from config.api import Pagination
from config.idempotency import key_header
from market.api.errors import api_exception
from market.api.ledger_serializers import (
    BalanceSerializer,
    EntrySerializer,
    LedgerFilterSerializer,
    MoneyMoveSerializer,
)
from market.selectors.ledger import ledger_entries, tenant_balance
from market.services import ledger as services


class BalanceView(APIView):
    @extend_schema(responses=BalanceSerializer, summary="The tenant's balance (micro-credits and credits)")
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        return Response(BalanceSerializer(BalanceSerializer.from_balance(tenant_balance(tenant=tenant))).data)


class LedgerView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[LedgerFilterSerializer],
        responses=EntrySerializer(many=True),
        summary="The tenant's journal entries, newest first (paginated)",
    )
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        query = LedgerFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        f = query.validated_data
        qs = ledger_entries(tenant=tenant, kind=f.get("kind"), since=f.get("since"), before=f.get("until"))
        paginator = Pagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(EntrySerializer(page, many=True).data)


_IDEMPOTENCY_HEADER = key_header(
    "The key, when the body has none; the same as the body's key when both are given. A retry with the same "
    "key and amount answers the first entry (200); another request under it is refused (409 "
    "idempotency_key_reused)."
)
_MOVE_RESPONSES = {
    201: EntrySerializer,
    200: OpenApiResponse(EntrySerializer, description="The key was used before: the first entry, unchanged."),
    409: OpenApiResponse(description="The key was used with different arguments, or the money is not there."),
}


class _MoneyMoveView(APIView):
    """POST {amount, key?, memo?}: admin only, keyed."""

    def move(self, request: Request, slug: str, service: Any) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        require_admin(caller(request))
        body = MoneyMoveSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        try:
            entry = service(tenant=tenant, actor=caller(request), **body.validated_data)
        except services.LedgerError as exc:
            raise api_exception(exc) from exc
        code = status.HTTP_200_OK if entry.replayed else status.HTTP_201_CREATED
        return Response(EntrySerializer(entry).data, status=code)


class TopupView(_MoneyMoveView):
    @extend_schema(
        request=MoneyMoveSerializer,
        parameters=[_IDEMPOTENCY_HEADER],
        responses=_MOVE_RESPONSES,
        summary="Add credits to the tenant (platform admins)",
    )
    def post(self, request: Request, slug: str) -> Response:
        return self.move(request, slug, services.ledger_topup)


class RefundView(_MoneyMoveView):
    @extend_schema(
        request=MoneyMoveSerializer,
        parameters=[_IDEMPOTENCY_HEADER],
        responses=_MOVE_RESPONSES,
        summary="Refund charged credits to the tenant (platform admins; at most its net charges)",
    )
    def post(self, request: Request, slug: str) -> Response:
        return self.move(request, slug, services.ledger_refund)
