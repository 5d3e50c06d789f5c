"""The team's spend alerts (docs/alerts.md): every member reads the rules and what they did; managers create,
edit, delete and lift them and see the webhook deliveries (a rule's page: its edit form and delivery log). The form is checked by the API's own serializer and the
service behind it, so both doors give the same messages."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from rest_framework import serializers

from accounts.access import caller
from accounts.models import User
from config.errors import PolicyError
from config.money import format_credits
from frontend.access import Seat, page, seat
from frontend.forms import flatten
from market.api.spend_alerts import RuleUpdateSerializer, RuleWriteSerializer, threshold_value
from market.models import AlertAction, AlertKind, SpendAlertRule, WebhookDelivery
from market.selectors.spend_alerts import (
    alert_notices,
    describe,
    rule_deliveries,
    secret_digest,
    tenant_rule,
    tenant_rules,
)
from market.services import spend_alerts as services

FIELDS = ("kind", "threshold", "action", "cap", "webhook_url")
EDIT_FIELDS = ("threshold", "action", "cap", "webhook_url")
DELIVERIES_PER_PAGE = 20


def _actor(request: HttpRequest, s: Seat) -> User:
    if not s.manages:
        raise PermissionDenied("Only the team's managers may change its spend alerts.")
    return caller(request)


def _create(
    request: HttpRequest, s: Seat, values: dict[str, str]
) -> tuple[services.Created | None, dict[str, str]]:
    body: dict[str, Any] = {k: values[k].strip() for k in FIELDS if values[k].strip()}
    body["email"] = "true" if values["email"] else "false"
    form = RuleWriteSerializer(data=body, context={"form": True})
    try:
        form.is_valid(raise_exception=True)
        args = dict(form.validated_data)
        args["threshold"] = threshold_value(args["kind"], args["threshold"])
        return services.spend_alert_create(actor=_actor(request, s), tenant=s.tenant, **args), {}
    except serializers.ValidationError as exc:
        return None, flatten(exc.detail)
    except PolicyError as exc:
        return None, {exc.field if exc.field in FIELDS else "form": exc.message}
    except services.TooManyRules as exc:
        return None, {"form": str(exc)}


@login_required
def alerts(request: HttpRequest, slug: str) -> HttpResponse:
    s = seat(request, slug)
    values = {k: request.POST.get(k, "") for k in FIELDS}
    values["email"] = request.POST.get("email", "") if request.method == "POST" else "on"
    errors: dict[str, str] = {}
    secret = ""
    if request.method == "POST":
        created, errors = _create(request, s, values)
        if created is not None:
            messages.success(request, f"Spend alert {created.rule.pk} created: {describe(created.rule)}.")
            if not created.secret:
                return redirect("frontend:alerts", slug=s.tenant.slug)
            # The webhook's secret is shown in this one answer, never again (and never put in the session).
            secret, values = created.secret, {k: "" for k in FIELDS} | {"email": "on"}
    response = page(
        request,
        "frontend/alerts.html",
        {
            "rules": [(r, describe(r)) for r in tenant_rules(tenant=s.tenant)],
            "notices": alert_notices(tenant=s.tenant),
            "deliveries": list(
                WebhookDelivery.objects.filter(firing__rule__tenant=s.tenant).select_related("firing")[:20]
            )
            if s.manages
            else [],
            "kinds": AlertKind.choices,
            "actions": AlertAction.choices,
            "values": values,
            "errors": errors,
            "secret": secret,
        },
        s,
    )
    if secret:
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def alert_lift(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    s = seat(request, slug)
    rule = tenant_rule(tenant=s.tenant, rule_id=rule_id)
    services.spend_alert_lift(actor=_actor(request, s), rule=rule)
    messages.success(request, f"Spend alert {rule.pk} lifted: new bids go through again.")
    return redirect("frontend:alerts", slug=s.tenant.slug)


@login_required
@require_POST
def alert_delete(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    s = seat(request, slug)
    rule = tenant_rule(tenant=s.tenant, rule_id=rule_id)
    services.spend_alert_delete(actor=_actor(request, s), rule=rule)
    messages.success(request, f"Spend alert {rule_id} deleted.")
    return redirect("frontend:alerts", slug=s.tenant.slug)


def _rule_values(rule: SpendAlertRule) -> dict[str, str]:
    """The edit form as the rule stands: amounts as the form takes them (credits, no thousands commas)."""
    threshold = str(rule.threshold) if rule.kind == AlertKind.RUNWAY else format_credits(rule.threshold)
    return {
        "threshold": threshold.replace(",", ""),
        "action": rule.action,
        "cap": format_credits(rule.cap).replace(",", "") if rule.cap is not None else "",
        "webhook_url": rule.webhook_url,
        "email": "on" if rule.email else "",
        "active": "on" if rule.active else "",
    }


def _update(
    request: HttpRequest, s: Seat, rule: SpendAlertRule, values: dict[str, str]
) -> tuple[services.Created | None, dict[str, str]]:
    """The API's PATCH in form clothes: every field is sent (an empty cap or URL clears it), checked by the
    same serializer and service."""
    body: dict[str, Any] = {k: values[k].strip() for k in EDIT_FIELDS}
    if not body["threshold"]:  # the API may leave it out of a PATCH; the form always has one
        return None, {"threshold": "is required"}
    body["cap"] = body["cap"] or None
    body["email"] = "true" if values["email"] else "false"
    body["active"] = "true" if values["active"] else "false"
    form = RuleUpdateSerializer(data=body, context={"form": True})
    try:
        form.is_valid(raise_exception=True)
        changes = dict(form.validated_data)
        changes["threshold"] = threshold_value(rule.kind, changes["threshold"])
        changed = services.spend_alert_update(
            actor=_actor(request, s),
            rule=rule,
            changes=changes,
            rotate_secret=bool(request.POST.get("rotate_secret")),
            seen_secret=request.POST.get("seen_secret", ""),
        )
        return changed, {}
    except serializers.ValidationError as exc:
        return None, flatten(exc.detail)
    except PolicyError as exc:
        known = (*EDIT_FIELDS, "email", "active", "rotate_secret")
        return None, {exc.field if exc.field in known else "form": exc.message}


@login_required
def alert_rule(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    """One rule: every member sees what it watches and its state; managers edit it (a new secret only when
    they tick "rotate", shown in that one answer) and read its webhook delivery log, newest first."""
    s = seat(request, slug)
    rule = tenant_rule(tenant=s.tenant, rule_id=rule_id)
    errors: dict[str, str] = {}
    secret = ""
    values = _rule_values(rule)
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in (*EDIT_FIELDS, "email", "active")}
        changed, errors = _update(request, s, rule, values)
        if changed is not None:
            messages.success(request, f"Spend alert {rule.pk} saved: {describe(changed.rule)}.")
            if not changed.secret:
                return redirect("frontend:alert_rule", slug=s.tenant.slug, rule_id=rule.pk)
            # Shown in this one answer, never again (and never put in the session).
            secret, rule, values = changed.secret, changed.rule, _rule_values(changed.rule)
        else:
            rule.refresh_from_db()  # the form keeps what was typed; the rest of the page shows the rule as stored
    deliveries = None
    if s.manages:
        deliveries = Paginator(rule_deliveries(rule=rule), DELIVERIES_PER_PAGE).get_page(
            request.GET.get("page")
        )
    response = page(
        request,
        "frontend/alert_rule.html",
        {
            "rule": rule,
            "text": describe(rule),
            "actions": AlertAction.choices,
            "values": values,
            "errors": errors,
            "secret": secret,
            "seen_secret": secret_digest(rule.webhook_secret),
            "page": deliveries,
        },
        s,
    )
    if secret:
        response["Cache-Control"] = "no-store"
    return response
