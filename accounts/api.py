"""API views for the caller and their tokens. Views parse, call a service or selector, serialize."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tokens
from accounts.access import access_tenant, caller, can_manage, user_roles, visible_tenants
from accounts.models import ApiToken
from accounts.serializers import MeSerializer, TokenCreatedSerializer, TokenCreateSerializer, TokenSerializer
from config.api import Pagination


class TokenRefused(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "too_many_tokens"


class MeView(APIView):
    @extend_schema(responses=MeSerializer, summary="The caller: user, tenants and roles")
    def get(self, request: Request) -> Response:
        user = caller(request)
        roles = user_roles(user)
        tenants = [
            {"slug": t.slug, "name": t.name, "role": roles.get(t.pk, "admin")}
            for t in visible_tenants(user, request.auth)
        ]
        token_tenant = request.auth.tenant.slug if isinstance(request.auth, ApiToken) else None
        data = {
            "username": user.username,
            "email": user.email,
            "is_admin": user.is_staff,
            "token_tenant": token_tenant,
            "tenants": tenants,
        }
        return Response(MeSerializer(data).data)


class TokenListView(APIView):
    pagination_class = Pagination

    @extend_schema(responses=TokenSerializer(many=True), summary="List tokens (managers see the tenant's)")
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        qs = tokens.tokens_visible(
            viewer=caller(request), tenant=tenant, manager=can_manage(caller(request), tenant)
        )
        paginator = Pagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(TokenSerializer(page, many=True).data)

    @extend_schema(
        request=TokenCreateSerializer,
        responses={
            201: TokenCreatedSerializer,
            409: OpenApiResponse(description="too_many_tokens: the user has API_TOKENS_PER_USER live ones."),
        },
        summary="Create a token",
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            issued = tokens.token_create(
                user=caller(request), tenant=tenant, name=body.validated_data["name"]
            )
        except tokens.TooManyTokens as exc:
            raise TokenRefused(str(exc)) from exc
        data: dict[str, Any] = dict(TokenSerializer(issued.token).data)
        data["token"] = issued.secret
        return Response(data, status=status.HTTP_201_CREATED)


class TokenDetailView(APIView):
    @extend_schema(responses={204: None}, summary="Revoke a token")
    def delete(self, request: Request, slug: str, token_id: int) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        qs = tokens.tokens_visible(
            viewer=caller(request), tenant=tenant, manager=can_manage(caller(request), tenant)
        )
        token = get_object_or_404(qs, pk=token_id)
        tokens.token_revoke(token=token, actor=caller(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
