"""A job's estimate before it is submitted: what the portal's submit form shows as one types (runtime, cost and
start per GPU type, and the bid guidance), for the command line and other clients. Writes nothing."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import access_tenant, caller
from market.api.jobs import submit_args
from market.api.jobs_serializers import EstimateSerializer, JobSubmitSerializer
from market.selectors.guidance import bid_guidance
from market.selectors.job_estimate import draft_estimate, max_hours_warning


class GuidanceSerializer(serializers.Serializer[object]):
    """market.selectors.guidance.Guidance: what one entry of the bid gets now."""

    gpu_type = serializers.CharField()
    reserve = serializers.IntegerField(help_text="Reserve price, micro-credits per GPU-hour.")
    posted = serializers.IntegerField(help_text="Posted price, micro-credits per GPU-hour.")
    unused_guarantee = serializers.IntegerField(help_text="GPUs of the team's guarantee not in use.")
    recent_spot = serializers.ListField(
        child=serializers.IntegerField(), help_text="The newest rounds' spot prices, newest first."
    )
    limit = serializers.IntegerField(allow_null=True, help_text="The entry's limit, micro-credits.")
    tier = serializers.CharField(allow_null=True, help_text="G, B or S; null when the limit cannot win.")
    advice = serializers.CharField(help_text="The guidance sentence the portal shows.")


class DraftEstimateSerializer(EstimateSerializer):
    guidance = GuidanceSerializer(many=True, help_text="Per entry of the bid, in its order.")
    warning = serializers.CharField(
        help_text="Max hours below what 90% of similar jobs needed; empty when none."
    )


class JobEstimateView(APIView):
    @extend_schema(
        request=JobSubmitSerializer,
        responses=DraftEstimateSerializer,
        summary="Estimate a job before submitting it (the submit body; nothing is written)",
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = access_tenant(caller(request), slug, auth=request.auth)
        args = submit_args(request.data)
        gpus, limits = args["gpus"], args["bids"]
        found = draft_estimate(
            tenant=tenant, name=args["name"], command=args["command"], gpus=gpus, limits=limits
        )
        guidance = [bid_guidance(tenant=tenant, gpu_type=t, limit=limit, gpus=gpus) for t, limit in limits]
        data = dict(EstimateSerializer(found).data)
        data["guidance"] = [GuidanceSerializer(g).data for g in guidance]
        data["warning"] = max_hours_warning(found, args["max_seconds"] / 3600)
        return Response(data)
