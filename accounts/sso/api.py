"""POST /api/v1/auth/oidc/token: an ID token from the organisation's provider (the command line gets one with
the device flow) traded for an API token, scoped like every other one: one user in one tenant (docs/sso.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tokens
from accounts.models import Tenant
from accounts.serializers import TokenCreatedSerializer, TokenSerializer
from accounts.sso.provider import ProviderUnavailable
from accounts.sso.services import SignInRefused, sso_sign_in
from accounts.sso.verify import TokenRefused, verify_id_token
from config.api import BodySerializer
from config.fields import TextField


class ExchangeSerializer(BodySerializer):
    refuse_unknown = True
    id_token = serializers.CharField(max_length=16_384, trim_whitespace=True)
    tenant = serializers.SlugField(max_length=50, required=False)
    name = TextField(max_length=100, required=False, default="gpumarket login --device")


class ExchangedSerializer(TokenCreatedSerializer):
    tenant = serializers.CharField(read_only=True)
    username = serializers.CharField(read_only=True)

    class Meta(TokenCreatedSerializer.Meta):
        fields = [*TokenCreatedSerializer.Meta.fields, "tenant", "username"]
        read_only_fields = fields


class ProviderDown(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "provider_unavailable"


def _invalid(field: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({field: [message]})


def _tenant(user: Any, slug: str | None) -> Tenant:
    """The tenant named, which the user must belong to; with none named, their only one."""
    mine = Tenant.objects.filter(memberships__user=user, active=True).order_by("slug")
    if slug is not None:
        found = mine.filter(slug=slug).first()
        if found is None:
            raise _invalid("tenant", f"you are not a member of {slug!r}")
        return found
    slugs = [t.slug for t in mine[:20]]
    if len(slugs) != 1:
        names = ", ".join(slugs) if slugs else "none: ask an admin to map one of your groups to a team"
        raise _invalid("tenant", f"name one of your teams ({names})")
    return mine[0]


class OidcTokenView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=ExchangeSerializer,
        responses={
            201: ExchangedSerializer,
            400: OpenApiResponse(description="invalid: id_token refused (the reason), or tenant not yours."),
            404: OpenApiResponse(description="single sign-on is not configured."),
            503: OpenApiResponse(
                description="provider_unavailable: the provider's keys could not be fetched."
            ),
        },
        summary="Trade an ID token from the identity provider for an API token",
        auth=[],
    )
    def post(self, request: Request) -> Response:
        if not settings.OIDC_ISSUER:
            raise exceptions.NotFound("Single sign-on is not configured.")
        body = ExchangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        audiences = [a for a in (settings.OIDC_CLI_CLIENT_ID, settings.OIDC_CLIENT_ID) if a]
        try:
            claims = verify_id_token(body.validated_data["id_token"], audiences=audiences, single_use=True)
            user = sso_sign_in(claims=claims)
        except TokenRefused as exc:
            raise _invalid("id_token", f"refused: {exc}") from exc
        except SignInRefused as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        except ProviderUnavailable as exc:
            raise ProviderDown(f"the identity provider cannot be reached: {exc}") from exc
        tenant = _tenant(user, body.validated_data.get("tenant"))
        try:
            issued = tokens.token_create(user=user, tenant=tenant, name=body.validated_data["name"])
        except tokens.TooManyTokens as exc:
            raise exceptions.ValidationError({"name": [str(exc)]}) from exc
        data: dict[str, Any] = dict(TokenSerializer(issued.token).data)
        data |= {"token": issued.secret, "tenant": tenant.slug, "username": user.username}
        return Response(data, status=status.HTTP_201_CREATED)
