"""Policy API: the market-wide knobs, a tenant's weight, guardrail and guarantees (the audit log that records
their changes is accounts.audit_api).

Everyone signed in reads the market policy (tenants should know the rules); a tenant's members read its own
policy; only platform admins change either or read the audit log. Views parse, call, serialize.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller, require_admin
from accounts.models import Tenant
from config.api import BodySerializer
from config.errors import PolicyError
from config.fields import TextField
from market.api.errors import api_exception
from market.api.ledger_serializers import CreditsField
from market.models import MarketPolicy
from market.models.policy import GUARANTEE_MAX, POLICY_LIMITS, WEIGHT_LIMITS
from market.selectors.policy import TenantPolicy, market_policy, tenant_policy
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_versions import REASON_MAX

# Market policy


class MarketPolicySerializer(serializers.ModelSerializer[MarketPolicy]):
    class Meta:
        model = MarketPolicy
        fields = [*POLICY_LIMITS, "updated_at"]
        read_only_fields = fields


def _knob(name: str, help_text: str) -> serializers.IntegerField:
    low, high = POLICY_LIMITS[name]
    return serializers.IntegerField(required=False, min_value=low, max_value=high, help_text=help_text)


class MarketPolicyPatchSerializer(BodySerializer):
    """Any subset of the knobs; unknown names are refused."""

    unknown_message = "is not a market policy setting"

    round_seconds = _knob("round_seconds", "Seconds between round starts.")
    price_step_bp = _knob("price_step_bp", "Posted price step per round, basis points (500 = 5%).")
    min_runtime_s = _knob("min_runtime_s", "A lease younger than this is never preempted, seconds.")
    default_grace_s = _knob("default_grace_s", "SIGTERM to SIGKILL for a job that sets none, seconds.")
    starve_rounds = _knob("starve_rounds", "Rounds a gang waits before nodes are reserved for it.")
    max_reservations = _knob(
        "max_reservations",
        "Blocked gangs (of the most-owed tenant, or starving) given reserved nodes per type, at most.",
    )
    max_reserved_pct = _knob("max_reserved_pct", "Share of a type's nodes reserved at once, at most (%).")
    fair_reclaim = _knob("fair_reclaim", "1: a tenant below its entitlement may preempt for it; 0: off.")
    fair_share_half_life_s = _knob(
        "fair_share_half_life_s", "Half-life of the fair-share history, seconds; 0: no history."
    )
    fair_share_payback_s = _knob(
        "fair_share_payback_s", "Owed GPU-hours are paid back over this many seconds (adds to entitlement)."
    )
    max_moves = _knob(
        "max_moves", "Running jobs moved per round at most to make room for a blocked gang; 0: none."
    )
    move_min_runtime_s = _knob("move_min_runtime_s", "A lease younger than this is never moved, seconds.")
    move_max_lost_gpu_s = _knob(
        "move_max_lost_gpu_s", "Never move a lease losing more GPU-seconds of work since its last checkpoint."
    )
    move_cooldown_s = _knob("move_cooldown_s", "A node moved from or to is left alone this long, seconds.")
    move_restart_s = _knob(
        "move_restart_s", "A move's cost per GPU, seconds; a move happens only when cheaper than waiting."
    )
    retention_days = _knob("retention_days", "Days round books, bid outcomes and old commands are kept.")
    energy_price_kwh = _knob("energy_price_kwh", "Micro-credits per measured kWh added to charges; 0: none.")
    idle_util_pct = _knob("idle_util_pct", "Release leases whose GPUs stay below this utilisation; 0: off.")
    idle_seconds = _knob("idle_seconds", "How long a lease may stay below idle_util_pct, seconds.")
    agent_report_budget_rps = _knob(
        "agent_report_budget_rps",
        "Agent reports per second for the whole fleet (sets each agent's interval).",
    )
    reason = TextField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="Why: kept with the policy version.",
    )


class MarketPolicyView(APIView):
    @extend_schema(responses=MarketPolicySerializer, summary="The market's rules (anyone signed in)")
    def get(self, request: Request) -> Response:
        return Response(MarketPolicySerializer(market_policy()).data)

    @extend_schema(
        request=MarketPolicyPatchSerializer,
        responses=MarketPolicySerializer,
        summary="Change market policy knobs (platform admins; audited)",
    )
    def patch(self, request: Request) -> Response:
        require_admin(caller(request))
        body = MarketPolicyPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            policy = policy_update(actor=caller(request), **body.validated_data)
        except PolicyError as exc:
            raise api_exception(exc) from exc
        return Response(MarketPolicySerializer(policy).data)


# Tenant policy


class HeldGpusSerializer(serializers.Serializer[object]):
    gpu_type = serializers.CharField()
    tier = serializers.CharField(help_text="G (guaranteed), B (borrowed) or S (spot).")
    gpus = serializers.IntegerField()


class TenantPolicySerializer(serializers.Serializer[object]):
    tenant = serializers.CharField()
    weight = serializers.IntegerField(help_text="Share of the excess GPUs relative to other tenants.")
    guardrail = serializers.IntegerField(
        allow_null=True,
        help_text="Most one round may hold for the tenant, micro-credits; null: no guardrail.",
    )
    guardrail_credits = CreditsField(allow_null=True, read_only=True)
    guarantees = serializers.DictField(
        child=serializers.IntegerField(), help_text="Guaranteed GPUs by GPU type name."
    )
    held = HeldGpusSerializer(many=True, help_text="GPUs of the tenant's live leases by type and tier.")

    @staticmethod
    def from_policy(policy: TenantPolicy) -> dict[str, Any]:
        tenant = policy.tenant
        return {
            "tenant": tenant.slug,
            "weight": tenant.weight,
            "guardrail": tenant.guardrail,
            "guardrail_credits": tenant.guardrail,
            "guarantees": policy.guarantees,
            "held": [{"gpu_type": t, "tier": tier, "gpus": n} for (t, tier), n in policy.held.items()],
        }


class TenantPolicyPatchSerializer(BodySerializer):
    """Any subset; all of it is applied or none. Unknown names are refused."""

    unknown_message = "is not a tenant policy setting"

    weight = serializers.IntegerField(required=False, min_value=WEIGHT_LIMITS[0], max_value=WEIGHT_LIMITS[1])
    guardrail = CreditsField(
        required=False,
        allow_zero=True,
        allow_null=True,
        help_text='Credits, e.g. "250" or "12.5"; null removes the guardrail.',
    )
    guarantees = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=GUARANTEE_MAX),
        required=False,
        help_text="Guaranteed GPUs by GPU type name; 0 removes a guarantee, types not named are unchanged.",
    )
    reason = TextField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="Why: kept with the policy version.",
    )


def _tenant_policy_response(tenant: Tenant) -> Response:
    return Response(
        TenantPolicySerializer(TenantPolicySerializer.from_policy(tenant_policy(tenant=tenant))).data
    )


class TenantPolicyView(APIView):
    @extend_schema(
        responses=TenantPolicySerializer, summary="The tenant's weight, guardrail, guarantees and GPUs held"
    )
    def get(self, request: Request, slug: str) -> Response:
        return _tenant_policy_response(access_tenant(caller(request), slug, auth=request.auth))

    @extend_schema(
        request=TenantPolicyPatchSerializer,
        responses=TenantPolicySerializer,
        summary="Change the tenant's weight, guardrail or guarantees (platform admins; all or nothing)",
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        require_admin(caller(request))
        body = TenantPolicyPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            tenant = tenant_policy_update(actor=caller(request), tenant=tenant, **body.validated_data)
        except PolicyError as exc:
            raise api_exception(exc) from exc
        return _tenant_policy_response(tenant)
