"""The platform admins' node API under /api/v1/nodes: bootstrap tokens, the node list, drain, resume, retire.

Like market/api/policy.py: admins only (403 for anyone else signed in), services write and audit, refusals are
the API's JSON errors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import caller, require_admin
from config.api import Pagination, no_body
from inventory.models import Node
from nodeagent.api import serializers as s
from nodeagent.api.errors import refused
from nodeagent.errors import NodeError
from nodeagent.selectors.nodes import node_list
from nodeagent.services import admin as services
from nodeagent.services.registration import bootstrap_token_create


class BootstrapTokenView(APIView):
    parser_classes = [JSONParser]

    @extend_schema(
        request=s.BootstrapCreateSerializer,
        responses={201: s.BootstrapTokenSerializer},
        summary="Create a one-time bootstrap token for a new node (platform admins; shown once; audited)",
    )
    def post(self, request: Request) -> Response:
        require_admin(caller(request))
        body = s.BootstrapCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        try:
            issued = bootstrap_token_create(
                actor=caller(request),
                name=v["name"],
                gpu_type=v["gpu_type"],
                topology_domain=v["topology_domain"],
                ttl=timedelta(hours=v["ttl_hours"]),
            )
        except NodeError as exc:
            raise refused(exc) from exc
        data = s.BootstrapTokenSerializer(issued.token, context={"secret": issued.secret}).data
        return Response(data, status=status.HTTP_201_CREATED)


class NodeListView(APIView):
    pagination_class = Pagination

    @extend_schema(
        parameters=[s.NodeFilterSerializer],
        responses=s.NodeSerializer(many=True),
        summary="Nodes with their GPUs' health and last heartbeat (platform admins; paginated)",
    )
    def get(self, request: Request) -> Response:
        require_admin(caller(request))
        query = s.NodeFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(node_list(**query.validated_data), request, view=self)
        return paginator.get_paginated_response(s.NodeSerializer(page, many=True).data)


def _node(name: str) -> Node:
    return get_object_or_404(node_list(), name=name)


class NodeDetailView(APIView):
    parser_classes = [JSONParser]

    @extend_schema(responses=s.NodeSerializer, summary="One node with its GPUs (platform admins)")
    def get(self, request: Request, name: str) -> Response:
        require_admin(caller(request))
        return Response(s.NodeSerializer(_node(name)).data)

    @extend_schema(
        request=s.NodeAddressSerializer,
        responses=s.NodeSerializer,
        summary="Set (pin) or clear the node's address, where a gang's other nodes reach it (platform admins; audited)",
    )
    def patch(self, request: Request, name: str) -> Response:
        require_admin(caller(request))
        node = _node(name)
        body = s.NodeAddressSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.node_set_address(
                node=node, actor=caller(request), address=body.validated_data["address"]
            )
        except NodeError as exc:
            raise refused(exc) from exc
        return Response(s.NodeSerializer(_node(name)).data)


class NodeActionView(APIView):
    """POST runs `service` on the named node; subclasses name the service and document it."""

    service: Callable[..., Node]

    def post(self, request: Request, name: str) -> Response:
        require_admin(caller(request))
        no_body(request)
        try:
            type(self).service(node=_node(name), actor=caller(request))
        except NodeError as exc:
            raise refused(exc) from exc
        return Response(s.NodeSerializer(_node(name)).data)


def _action(summary: str, conflict: str) -> Callable[[type[NodeActionView]], type[NodeActionView]]:
    return extend_schema_view(
        post=extend_schema(
            request=None,
            responses={200: s.NodeSerializer, 409: OpenApiResponse(description=conflict)},
            summary=summary,
        )
    )


@_action("Drain: no new work; running leases finish (platform admins; audited)", "node_retired")
class NodeDrainView(NodeActionView):
    service = services.node_drain


@_action("Undo a drain: the node takes new work again (platform admins; audited)", "node_retired")
class NodeResumeView(NodeActionView):
    service = services.node_resume


@_action(
    "Retire: no work at all, only once no lease lives on it (platform admins; audited)",
    "node_busy: live leases remain (drain the node and wait for them to end).",
)
class NodeRetireView(NodeActionView):
    service = services.node_retire
