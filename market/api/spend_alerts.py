"""Spend alerts API (docs/alerts.md): members read the team's rules; managers and platform admins create,
change, delete them, lift a pause or cap, and read webhook deliveries. Views parse, call, serialize."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller, can_manage
from accounts.models import Tenant
from config.api import BodySerializer, Pagination, no_body
from config.errors import PolicyError
from config.fields import DecimalStringField, TextField
from config.idempotency import header_key, key_header, request_digest
from config.money import MICRO, format_credits
from market.api.errors import api_exception
from market.api.ledger_serializers import CreditsField
from market.models import AlertAction, AlertKind, SpendAlertRule
from market.selectors.spend_alerts import describe, rule_deliveries, tenant_rule, tenant_rules
from market.services import spend_alerts as services

THRESHOLD_HELP = (
    'Credits for the spend kinds ("50" is 50 credits in the UTC day or ISO week); whole hours for '
    "runway_hours (fires when the money lasts fewer hours at the recent burn rate)."
)


def threshold_value(kind: str, threshold: Decimal) -> int:
    """A threshold as stored: micro-credits for the spend kinds, whole hours for the runway kind (the portal
    reads its form through this too)."""
    if kind == AlertKind.RUNWAY:
        if threshold != threshold.to_integral_value():
            raise PolicyError("threshold", "must be a whole number of hours")
        return int(threshold)
    return int(threshold * MICRO)


class RuleWriteSerializer(BodySerializer):
    unknown_message = "is not a spend alert setting"

    kind = serializers.ChoiceField(choices=AlertKind.choices)
    threshold: DecimalStringField[Decimal] = DecimalStringField(
        places=6, low=Decimal(1) / MICRO, high=Decimal(10**9), help_text=THRESHOLD_HELP
    )
    action = serializers.ChoiceField(
        choices=AlertAction.choices,
        required=False,
        help_text="notify; pause (refuse every new bid); cap (refuse a bid whose worst-case cost would take "
        "the period's spend, open holds and pending bids past `cap`). Both last until a manager lifts them.",
    )
    cap = CreditsField(required=False, allow_null=True, help_text="Credits; the cap action only.")
    email = serializers.BooleanField(required=False, help_text="Mail the team's managers (default true).")
    webhook_url = TextField(
        required=False,
        allow_blank=True,
        max_length=500,
        # What a schema can say of the URL rule (market.services.webhooks.check_webhook_url says the rest: a
        # valid port, and no private address unless the platform allows it).
        pattern=r"(?:https?://[^\s@/?#]+(?:[/?#]\S*)?)?",
        pattern_message="must be an http:// or https:// URL without a user name or password",
        help_text="http(s) URL receiving a signed POST; empty for none.",
    )


class RuleUpdateSerializer(RuleWriteSerializer):
    kind = None  # type: ignore[assignment]  # the kind stays: a new kind is a new rule
    threshold: DecimalStringField[Decimal] = DecimalStringField(
        places=6, low=Decimal(1) / MICRO, high=Decimal(10**9), required=False, help_text=THRESHOLD_HELP
    )
    active = serializers.BooleanField(required=False, help_text="An inactive rule is not evaluated.")
    rotate_secret = serializers.BooleanField(
        required=False,
        help_text="true: a new webhook secret, in this answer only (the old one stops working).",
    )


class RuleSerializer(serializers.Serializer[object]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    threshold = serializers.CharField(help_text="Credits, or hours for runway_hours.")
    unit = serializers.CharField()
    description = serializers.CharField()
    action = serializers.CharField()
    cap = serializers.CharField(allow_null=True)
    email = serializers.BooleanField()
    webhook = serializers.BooleanField()
    webhook_url = serializers.CharField(help_text="Shown to managers; empty for members.")
    active = serializers.BooleanField()
    blocked = serializers.BooleanField(help_text="New bids are paused or capped by this rule now.")
    blocked_since = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class CreatedSerializer(RuleSerializer):
    secret = serializers.CharField(
        help_text="The webhook's signing secret, in this answer only (empty without a webhook)."
    )


class DeliverySerializer(serializers.Serializer[object]):
    id = serializers.IntegerField()
    alert = serializers.IntegerField(source="firing_id")
    period = serializers.CharField(source="firing.period")
    attempt = serializers.IntegerField()
    url = serializers.CharField()
    status_code = serializers.IntegerField(allow_null=True)
    ok = serializers.BooleanField()
    error = serializers.CharField()
    duration_ms = serializers.IntegerField()
    created_at = serializers.DateTimeField()


def render(rule: SpendAlertRule, *, manages: bool, secret: str | None = None) -> dict[str, Any]:
    runway = rule.kind == AlertKind.RUNWAY
    data = {
        "id": rule.pk,
        "kind": rule.kind,
        "threshold": str(rule.threshold) if runway else format_credits(rule.threshold).replace(",", ""),
        "unit": "hours" if runway else "credits",
        "description": describe(rule),
        "action": rule.action,
        "cap": None if rule.cap is None else format_credits(rule.cap).replace(",", ""),
        "email": rule.email,
        "webhook": bool(rule.webhook_url),
        "webhook_url": rule.webhook_url if manages else "",
        "active": rule.active,
        "blocked": rule.blocked_since is not None,
        "blocked_since": rule.blocked_since,
        "created_at": rule.created_at,
    }
    if secret is not None:
        data["secret"] = secret
        return dict(CreatedSerializer(data).data)
    return dict(RuleSerializer(data).data)


class TooManyRules(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "too_many_spend_alerts"


def _write(call: Any, **kwargs: Any) -> Any:
    """A service call with its refusals as API answers: a field's as 400, a non-manager's as 403, one rule too
    many as 409."""
    try:
        return call(**kwargs)
    except services.NotPermitted as exc:
        raise exceptions.PermissionDenied(str(exc)) from exc
    except services.TooManyRules as exc:
        raise TooManyRules(str(exc)) from exc
    except PolicyError as exc:
        raise api_exception(exc) from exc


def _rule_args(tenant_kind: str | None, data: dict[str, Any]) -> dict[str, Any]:
    args = dict(data)
    if "threshold" in args:
        kind = args.get("kind", tenant_kind)
        args["threshold"] = _write(lambda: threshold_value(str(kind), args["threshold"]))
    return args


def _secret_answer(response: Response) -> Response:
    """An answer carrying a webhook secret is kept by no cache: it is shown this once."""
    if response.data.get("secret"):
        response["Cache-Control"] = "no-store"
    return response


class RuleListView(APIView):
    @extend_schema(responses=RuleSerializer(many=True), summary="The team's spend alerts (any member)")
    def get(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        manages = can_manage(caller(request), tenant)
        return Response([render(r, manages=manages) for r in tenant_rules(tenant=tenant)])

    @extend_schema(
        request=RuleWriteSerializer,
        parameters=[
            key_header(
                "A retry with the same key and body returns the first rule (200, with its secret); the same "
                "key with another body is refused (409 idempotency_key_reused)."
            )
        ],
        responses={
            201: CreatedSerializer,
            200: OpenApiResponse(CreatedSerializer, description="A retry with the same Idempotency-Key."),
            403: OpenApiResponse(description="Neither a manager of the team nor a platform admin."),
            409: OpenApiResponse(
                description="too_many_spend_alerts: the team has 20 already; idempotency_key_reused."
            ),
        },
        summary="Create a spend alert (managers); the webhook secret is in this answer only",
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth, manage=True)
        body = RuleWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        args = _rule_args(None, body.validated_data)
        key = _write(header_key, headers=request.headers)
        created = _write(
            services.spend_alert_create,
            actor=caller(request),
            tenant=tenant,
            client_key=key,
            request_digest=request_digest(request.data) if key else "",
            **args,
        )
        code = status.HTTP_201_CREATED if created.created else status.HTTP_200_OK
        return _secret_answer(
            Response(render(created.rule, manages=True, secret=created.secret), status=code)
        )


def _rule(
    request: Request, slug: str, rule_id: int, *, manage: bool = False
) -> tuple[Tenant, SpendAlertRule]:
    """The team's rule (another team's id is a 404 whoever asks), then, to change it, the manager check."""
    tenant = access_tenant(caller(request), slug, auth=request.auth)
    rule = tenant_rule(tenant=tenant, rule_id=rule_id)
    if manage and not can_manage(caller(request), tenant):
        raise exceptions.PermissionDenied("Only the team's managers or platform admins may do this.")
    return tenant, rule


class RuleDetailView(APIView):
    @extend_schema(responses=RuleSerializer, summary="One spend alert (any member)")
    def get(self, request: Request, slug: str, rule_id: int) -> Response:
        tenant, rule = _rule(request, slug, rule_id)
        return Response(render(rule, manages=can_manage(caller(request), tenant)))

    @extend_schema(
        request=RuleUpdateSerializer,
        responses={200: CreatedSerializer, 403: OpenApiResponse(description="Not a manager.")},
        summary="Change a spend alert (managers); a first webhook URL or rotate_secret gives a new secret, "
        "in this answer only",
    )
    def patch(self, request: Request, slug: str, rule_id: int) -> Response:
        _, rule = _rule(request, slug, rule_id, manage=True)
        body = RuleUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changes = _rule_args(rule.kind, body.validated_data)
        rotate = bool(changes.pop("rotate_secret", False))
        changed = _write(
            services.spend_alert_update,
            actor=caller(request),
            rule=rule,
            changes=changes,
            rotate_secret=rotate,
        )
        return _secret_answer(Response(render(changed.rule, manages=True, secret=changed.secret)))

    @extend_schema(
        request=None,
        responses={204: None, 403: OpenApiResponse(description="Not a manager.")},
        summary="Delete a spend alert (managers); a pause it held ends with it",
    )
    def delete(self, request: Request, slug: str, rule_id: int) -> Response:
        _, rule = _rule(request, slug, rule_id, manage=True)
        _write(services.spend_alert_delete, actor=caller(request), rule=rule)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RuleLiftView(APIView):
    @extend_schema(
        request=None,
        responses={200: RuleSerializer, 403: OpenApiResponse(description="Not a manager.")},
        summary="Lift a spend alert's pause or cap (managers): new bids go through again",
    )
    def post(self, request: Request, slug: str, rule_id: int) -> Response:
        _, rule = _rule(request, slug, rule_id, manage=True)
        no_body(request)
        rule = _write(services.spend_alert_lift, actor=caller(request), rule=rule)
        return Response(render(rule, manages=True))


class DeliveryListView(APIView):
    pagination_class = Pagination

    @extend_schema(
        responses=DeliverySerializer(many=True),
        summary="A spend alert's webhook attempts, newest first (managers; paginated)",
    )
    def get(self, request: Request, slug: str, rule_id: int) -> Response:
        _, rule = _rule(request, slug, rule_id, manage=True)
        paginator = Pagination()
        page = paginator.paginate_queryset(rule_deliveries(rule=rule), request, view=self)
        return paginator.get_paginated_response(DeliverySerializer(page, many=True).data)
