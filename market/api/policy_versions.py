"""Policy versions and canaries API (platform admins; docs/policy.md §Versions, §Canary). Views parse, call,
serialize."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import require_admin
from accounts.models import User
from config.api import BodySerializer, Pagination, QuerySerializer
from config.errors import PolicyError
from config.fields import TextField
from config.idempotency import HEADER, IdempotencyKeyReused, header_key, key_header
from config.money import MAX_AMOUNT
from market.api.errors import api_exception
from market.api.policy import _knob
from market.models import AllowancePeriod, OnExpiry, PolicyCanary, PolicyVersion, VersionStatus
from market.models.policy import GUARANTEE_MAX, POLICY_LIMITS, WEIGHT_LIMITS
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import (
    applied_as,
    current_version,
    snapshot_diff,
    version_by_number,
    version_target,
    versions,
)
from market.services import canary as canaries
from market.services.policy_apply import policy_revert
from market.services.policy_proposals import policy_version_propose
from market.services.policy_versions import REASON_MAX


def _admin(request: Request) -> User:
    """The caller, a platform admin (403 for anyone else)."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Only platform admins may do this.")
    require_admin(user)
    return user


# Versions


class VersionSerializer(serializers.ModelSerializer[PolicyVersion]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    # DRF's stubs type Field.parent as the enclosing serializer; DRF's metaclass takes a declared field of that
    # name out of the class, so at run time it is this field.
    parent: serializers.SlugRelatedField[PolicyVersion] = serializers.SlugRelatedField(  # type: ignore[assignment]  # the stubs see Field.parent (above)
        slug_field="number", read_only=True, allow_null=True
    )
    detail = serializers.JSONField(
        read_only=True, help_text="Tenants and GPU types skipped; the canary's scope."
    )

    class Meta:
        model = PolicyVersion
        fields = ["number", "kind", "status", "created_at", "actor", "reason", "parent", "detail"]
        read_only_fields = fields


class ChangeSerializer(serializers.Serializer[object]):
    path = serializers.CharField(help_text='Dotted path in the snapshot, e.g. "tenants.beta.weight".')
    old = serializers.JSONField(allow_null=True, help_text="The value in force now (null: absent).")
    new = serializers.JSONField(allow_null=True, help_text="This version's value (null: absent).")


class VersionDetailSerializer(VersionSerializer):
    snapshot = serializers.JSONField(read_only=True, help_text="The whole policy as this version records it.")
    current = serializers.IntegerField(allow_null=True, read_only=True, help_text="The version in force.")
    diff = ChangeSerializer(many=True, read_only=True, help_text="From the policy in force to this version.")
    applied_as = serializers.IntegerField(
        allow_null=True,
        read_only=True,
        help_text="A proposed draft applied to everyone: the version (kind apply) that applied it.",
    )

    class Meta(VersionSerializer.Meta):
        fields = [*VersionSerializer.Meta.fields, "snapshot", "current", "diff", "applied_as"]
        read_only_fields = fields


def _detail(version: PolicyVersion) -> dict[str, Any]:
    current = current_version()
    data = dict(VersionSerializer(version).data)
    changes = snapshot_diff(policy_snapshot(), version_target(version))
    applied = applied_as(drafts=[version]).get(version.pk)
    return {
        **data,
        "snapshot": version.snapshot,
        "current": current.number if current else None,
        "diff": [c._asdict() for c in changes],
        "applied_as": applied.number if applied else None,
    }


def _version(number: int) -> PolicyVersion:
    version = version_by_number(number)
    if version is None:
        raise Http404("no such policy version")
    return version


class VersionFilterSerializer(QuerySerializer):
    status = serializers.ChoiceField(choices=VersionStatus.choices, required=False)


def _reason(**kwargs: Any) -> TextField:
    return TextField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="Why (shown in the list).",
        **kwargs,
    )


# The snapshot's form, part by part, so the schema states every rule of it a request can keep (which names
# exist and the cluster's capacity for guarantees are data: the service checks those, naming the path).


def _amount(**kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=MAX_AMOUNT, **kwargs)


class KnobsSerializer(BodySerializer):
    unknown_message = "is not a market policy setting"

    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]  # any DRF field
        return {name: _knob(name, "See PATCH /policy.") for name in POLICY_LIMITS}


class PricesSerializer(BodySerializer):
    reserve_price = _amount(required=False, help_text="Micro-credits per GPU-hour.")
    max_price = _amount(required=False, help_text="Micro-credits per GPU-hour, at least the reserve.")


class AllowanceSerializer(BodySerializer):
    amount = serializers.IntegerField(min_value=1, max_value=MAX_AMOUNT, help_text="Micro-credits a period.")
    period = serializers.ChoiceField(choices=AllowancePeriod.choices)
    cap = _amount()
    active = serializers.BooleanField()


class TenantPartSerializer(BodySerializer):
    weight = serializers.IntegerField(required=False, min_value=WEIGHT_LIMITS[0], max_value=WEIGHT_LIMITS[1])
    guardrail = _amount(required=False, allow_null=True, help_text="Micro-credits; null: none.")
    guarantees = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=GUARANTEE_MAX),
        required=False,
        help_text="GPUs by type name; merged over the tenant's, 0 removes one.",
    )
    allowance = AllowanceSerializer(required=False, allow_null=True, help_text="Replaced whole; null: none.")


class SnapshotSerializer(BodySerializer):
    market = KnobsSerializer(required=False)
    gpu_types = serializers.DictField(child=PricesSerializer(), required=False, help_text="By type name.")
    tenants = serializers.DictField(child=TenantPartSerializer(), required=False, help_text="By slug.")


class ProposeSerializer(BodySerializer):
    snapshot = SnapshotSerializer(
        help_text="A full or partial snapshot; what is not named is taken from the policy in force."
    )
    reason = _reason()


def _key(request: Request) -> str | None:
    """The Idempotency-Key header by the one rule (config/idempotency.header_key); None without one."""
    try:
        return header_key(request.headers) or None
    except PolicyError as exc:
        raise api_exception(exc) from exc


def _refused(exc: PolicyError) -> Exception:
    """A service's refusal, its `key` argument named as the header it came in."""
    if exc.field != "key":
        return api_exception(exc)
    if isinstance(exc, IdempotencyKeyReused):
        return api_exception(IdempotencyKeyReused(exc.message))
    return api_exception(PolicyError(HEADER, exc.message))


class VersionListView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[VersionFilterSerializer],
        responses=VersionSerializer(many=True),
        summary="Policy versions, newest first (platform admins; paginated)",
    )
    def get(self, request: Request) -> Response:
        _admin(request)
        query = VersionFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(versions(**query.validated_data), request, view=self)
        return paginator.get_paginated_response(VersionSerializer(page, many=True).data)

    @extend_schema(
        request=ProposeSerializer,
        responses={201: VersionDetailSerializer},
        parameters=[
            key_header(
                "A retry with the same key and body returns the first draft; the same key for another draft "
                "is refused (409 idempotency_key_reused)."
            )
        ],
        summary="Record a proposed version (a draft, not applied; platform admins)",
    )
    def post(self, request: Request) -> Response:
        admin = _admin(request)
        body = ProposeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = _key(request)
        try:
            version = policy_version_propose(actor=admin, key=key, **body.validated_data)
        except PolicyError as exc:
            raise _refused(exc) from exc
        return Response(_detail(version), status=status.HTTP_201_CREATED)


class VersionDetailView(APIView):
    @extend_schema(
        responses=VersionDetailSerializer, summary="One version with its diff against the one in force"
    )
    def get(self, request: Request, number: int) -> Response:
        _admin(request)
        return Response(_detail(_version(number)))


class ReasonSerializer(BodySerializer):
    reason = _reason()


class RevertResultSerializer(serializers.Serializer[object]):
    version = VersionSerializer(
        allow_null=True, help_text="The revert version (or the one in force if unchanged)."
    )
    changed = serializers.BooleanField()
    replayed = serializers.BooleanField(help_text="A retry with the same Idempotency-Key: the first answer.")
    skipped_tenants = serializers.ListField(child=serializers.CharField())
    skipped_types = serializers.ListField(child=serializers.CharField())


class RevertView(APIView):
    @extend_schema(
        request=ReasonSerializer,
        responses=RevertResultSerializer,
        parameters=[
            key_header(
                "A retry with the same key returns the first revert; the same key for a revert to another "
                "version is refused (409 idempotency_key_reused)."
            )
        ],
        summary="Make this version's policy the one in force for everyone (platform admins; audited)",
    )
    def post(self, request: Request, number: int) -> Response:
        admin = _admin(request)
        version = _version(number)
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = _key(request)
        try:
            result = policy_revert(actor=admin, version=version, key=key, **body.validated_data)
        except PolicyError as exc:
            raise _refused(exc) from exc
        return Response(
            {
                "version": VersionSerializer(result.version).data if result.version else None,
                "changed": result.changed,
                "replayed": result.replayed,
                "skipped_tenants": result.skipped_tenants,
                "skipped_types": result.skipped_types,
            }
        )


# Canaries


class CanarySerializer(serializers.ModelSerializer[PolicyCanary]):
    version: serializers.SlugRelatedField[PolicyVersion] = serializers.SlugRelatedField(
        slug_field="number", read_only=True
    )
    base: serializers.SlugRelatedField[PolicyVersion] = serializers.SlugRelatedField(
        slug_field="number", read_only=True
    )
    started: serializers.SlugRelatedField[PolicyVersion] = serializers.SlugRelatedField(
        slug_field="number", read_only=True
    )
    ended: serializers.SlugRelatedField[PolicyVersion] = serializers.SlugRelatedField(
        slug_field="number", read_only=True, allow_null=True
    )
    started_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    tenants = serializers.ListField(child=serializers.CharField(), read_only=True)
    last_check = serializers.JSONField(read_only=True, help_text="The guardrails' figures at the last check.")

    class Meta:
        model = PolicyCanary
        fields = [
            "id", "version", "base", "started", "ended", "tenants", "market", "started_by", "started_at",
            "ends_at", "on_expiry", "window_s", "min_compliance_pct", "max_failed_rounds",
            "max_preemptions_per_hour", "state", "ended_at", "end_reason", "checked_at", "last_check",
        ]  # fmt: skip
        read_only_fields = fields


def _limited(limits: tuple[int, int], help_text: str, **kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, min_value=limits[0], max_value=limits[1], help_text=help_text, **kwargs
    )


class CanaryStartSerializer(BodySerializer):
    """Name at least one tenant or set `market`; the tenants must be in the version."""

    version = serializers.IntegerField(
        min_value=1, max_value=2_147_483_647, help_text="The version's number (usually a proposed one)."
    )
    tenants = serializers.ListField(
        child=TextField(max_length=64), required=False, default=list, max_length=1000, help_text="Slugs."
    )
    market = serializers.BooleanField(required=False, default=False, help_text="Apply the market part too.")
    duration_s = _limited(canaries.DURATION_LIMITS, "Bounded time, seconds; null: until promoted or ended.",
                          allow_null=True, default=None)  # fmt: skip
    on_expiry = serializers.ChoiceField(choices=OnExpiry.choices, required=False, default=OnExpiry.REVERT)
    window_s = _limited(canaries.WINDOW_LIMITS, "The guardrails look this far back, seconds.", default=3600)
    min_compliance_pct = _limited(
        canaries.GUARDRAIL_LIMITS["min_compliance_pct"],
        "Revert when any tenant's fair-share compliance over the window falls below this (%); null: off.",
        allow_null=True,
        default=None,
    )
    max_failed_rounds = _limited(
        canaries.GUARDRAIL_LIMITS["max_failed_rounds"],
        "Revert when more rounds than this fail within the window; null: off.",
        allow_null=True,
        default=None,
    )
    max_preemptions_per_hour = _limited(
        canaries.GUARDRAIL_LIMITS["max_preemptions_per_hour"],
        "Revert when preemptions over the window exceed this rate per hour; null: off.",
        allow_null=True,
        default=None,
    )
    reason = _reason()


def _canary(canary_id: int) -> PolicyCanary:
    canary = PolicyCanary.objects.filter(pk=canary_id).first()
    if canary is None:
        raise Http404("no such canary")
    return canary


class CanaryListView(APIView):
    pagination_class = Pagination

    @extend_schema(responses=CanarySerializer(many=True), summary="Canaries, newest first (platform admins)")
    def get(self, request: Request) -> Response:
        _admin(request)
        paginator = self.pagination_class()
        qs = PolicyCanary.objects.select_related("version", "base", "started", "ended", "started_by")
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(CanarySerializer(page, many=True).data)

    @extend_schema(
        request=CanaryStartSerializer,
        responses={201: CanarySerializer},
        summary="Start a canary: a version on some tenants and/or the market part (platform admins; audited)",
    )
    def post(self, request: Request) -> Response:
        admin = _admin(request)
        body = CanaryStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        version = version_by_number(data.pop("version"))
        if version is None:
            raise api_exception(PolicyError("version", "is not a policy version"))
        try:
            canary = canaries.canary_start(actor=admin, version=version, **data)
        except (PolicyError, canaries.CanaryConflict) as exc:
            raise api_exception(exc) from exc
        return Response(CanarySerializer(canary).data, status=status.HTTP_201_CREATED)


class CanaryDetailView(APIView):
    @extend_schema(responses=CanarySerializer, summary="One canary with its guardrails' last figures")
    def get(self, request: Request, canary_id: int) -> Response:
        _admin(request)
        return Response(CanarySerializer(_canary(canary_id)).data)


class _CanaryEndView(APIView):
    promote = False

    def post(self, request: Request, canary_id: int) -> Response:
        admin = _admin(request)
        _canary(canary_id)
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        end = canaries.canary_promote if self.promote else canaries.canary_revert
        try:
            canary = end(actor=admin, canary_id=canary_id, **body.validated_data)
        except (PolicyError, canaries.CanaryConflict) as exc:
            raise api_exception(exc) from exc
        return Response(CanarySerializer(canary).data)


class CanaryPromoteView(_CanaryEndView):
    promote = True

    @extend_schema(
        request=ReasonSerializer, responses=CanarySerializer, summary="Promote: apply the version to everyone"
    )
    def post(self, request: Request, canary_id: int) -> Response:
        return super().post(request, canary_id)


class CanaryEndView(_CanaryEndView):
    @extend_schema(
        request=ReasonSerializer, responses=CanarySerializer, summary="End: put back the version before it"
    )
    def post(self, request: Request, canary_id: int) -> Response:
        return super().post(request, canary_id)
