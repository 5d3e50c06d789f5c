"""A tenant's hold sizing: members read it, managers (and platform admins) change it. docs/predictions.md."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller
from config.api import BodySerializer
from market.models import HoldPolicy, OnHoldEnd
from market.selectors.holds import hold_policy
from market.services.hold_policy import HoldPolicyRefused, hold_policy_set


class HoldPolicySerializer(BodySerializer):
    unknown_message = "is not a hold setting"

    sized_by_prediction = serializers.BooleanField(
        required=False,
        help_text="Hold the predicted 90th-percentile runtime (capped by max hours) instead of max hours.",
    )
    on_hold_end = serializers.ChoiceField(
        choices=OnHoldEnd.choices,
        required=False,
        help_text="A job still running when its hold runs out: extend it from the available balance, or stop "
        "it (a warning comes 15 minutes before either stop).",
    )
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)


def _render(policy: HoldPolicy) -> dict[str, object]:
    return dict(HoldPolicySerializer(policy).data)


class HoldPolicyView(APIView):
    @extend_schema(responses=HoldPolicySerializer, summary="The tenant's hold sizing (any member)")
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        return Response(_render(hold_policy(tenant=tenant)))

    @extend_schema(
        request=HoldPolicySerializer,
        responses={
            200: HoldPolicySerializer,
            403: OpenApiResponse(description="Neither a manager of the tenant nor a platform admin."),
        },
        summary="Change the tenant's hold sizing (managers); applies to holds taken from the next round",
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        body = HoldPolicySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            policy = hold_policy_set(tenant=tenant, actor=caller(request), **body.validated_data)
        except HoldPolicyRefused as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(_render(policy))
