"""The agent API under /api/v1/agent/ (docs/agent.md §Protocol). Views parse, call a service, serialize.

Every view authenticates with NodeAuthentication only (a tenant's API token is not an agent secret) and reaches
leases and commands through selectors scoped to the calling node: anything else is 404.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.parsers import MeasurementJSONParser
from market.selectors.policy import current_fence
from nodeagent.api import serializers as s
from nodeagent.api.auth import IsNode, NodeAuthentication
from nodeagent.api.errors import refused
from nodeagent.errors import NodeError
from nodeagent.models import Node
from nodeagent.selectors.nodes import node_command, node_lease, pending_commands
from nodeagent.services.heartbeat import GpuHealth, node_heartbeat
from nodeagent.services.lease_events import command_ack, lease_exited, lease_started
from nodeagent.services.registration import node_register, node_reregister
from nodeagent.services.usage import usage_ingest
from nodeagent.services.usage_parse import parse_counters, parse_report
from ops import metrics

LONG_POLL_STEP_S = 0.5

_NOT_YOURS = OpenApiResponse(description="Not this node's (another node's lease or command, or none at all).")


class AgentView(APIView):
    authentication_classes = [NodeAuthentication]
    parser_classes = [MeasurementJSONParser]  # plain floats: measurements, not amounts (config/parsers.py)
    permission_classes = [IsNode]

    def node(self, request: Request) -> Node:
        node = request.auth
        assert isinstance(node, Node)  # IsNode
        return node


class RegisterView(AgentView):
    permission_classes = []

    @extend_schema(
        request=s.RegisterSerializer,
        responses={201: s.RegisteredSerializer, 200: s.RegisteredSerializer},
        summary="Register the node (bootstrap token, once) or its GPUs again (node credential)",
    )
    def post(self, request: Request) -> Response:
        if request.auth is None:
            raise exceptions.NotAuthenticated()
        body = s.RegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        gpus, version = body.gpu_infos(), body.validated_data["agent_version"]
        try:
            if isinstance(request.auth, Node):
                done = node_reregister(node=request.auth, agent_version=version, gpus=gpus)
            else:
                registered = node_register(
                    raw_token=request.user.raw,
                    name=body.validated_data.get("name", ""),
                    agent_version=version,
                    gpus=gpus,
                )
                if registered is None:  # another registration claimed the token meanwhile
                    raise exceptions.AuthenticationFailed("Invalid, used or expired bootstrap token.")
                done = registered
        except NodeError as exc:
            raise refused(exc) from exc
        data = {
            "node": done.node.pk,
            "name": done.node.name,
            "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS,
            "poll_seconds": settings.AGENT_POLL_SECONDS,
        }
        if done.credential:
            data["credential"] = done.credential
        code = status.HTTP_201_CREATED if done.created else status.HTTP_200_OK
        return Response(s.RegisteredSerializer(data).data, status=code)


class HeartbeatView(AgentView):
    @extend_schema(request=s.HeartbeatSerializer, responses=s.HeartbeatReplySerializer, summary="I am alive")
    def post(self, request: Request) -> Response:
        body = s.HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        node = node_heartbeat(
            node=self.node(request),
            boot_epoch=v["boot_epoch"],
            gpus=[GpuHealth(uuid=g["uuid"], healthy=g["healthy"], error=g["error"]) for g in v["gpus"]],
            leases=v["leases"],
        )
        reply = {"state": node.state, "fence": current_fence(), "server_time": timezone.now()}
        return Response(s.HeartbeatReplySerializer(reply).data)


class CommandsView(AgentView):
    @extend_schema(
        parameters=[s.CommandsQuerySerializer],
        responses=s.CommandsSerializer,
        summary="Pending commands after `after`, in id order; `wait` long-polls up to 25 s",
    )
    def get(self, request: Request) -> Response:
        query = s.CommandsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        node, after = self.node(request), query.validated_data["after"]
        deadline = time.monotonic() + query.validated_data["wait"]
        # Each look is its own short query: no transaction stays open while the request waits.
        commands = pending_commands(node=node, after=after)
        while not commands and time.monotonic() < deadline:
            time.sleep(min(LONG_POLL_STEP_S, max(0.0, deadline - time.monotonic())))
            commands = pending_commands(node=node, after=after)
        for command in commands:
            metrics.agent_command(
                "fetched", kind=command.kind, node=node.name, command_id=command.pk, lease_id=command.lease_id
            )
        return Response(s.CommandsSerializer({"commands": commands}).data)


class AckView(AgentView):
    @extend_schema(
        request=s.AckSerializer,
        responses={200: s.CommandSerializer, 404: _NOT_YOURS},
        summary="The command was applied or refused (idempotent)",
    )
    def post(self, request: Request, command_id: int) -> Response:
        command = node_command(node=self.node(request), command_id=command_id)
        body = s.AckSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        command = command_ack(command=command, **body.validated_data)
        metrics.agent_command(
            "refused" if body.validated_data["result"] == "refused" else "acked",
            kind=command.kind,
            node=self.node(request).name,
            command_id=command.pk,
            lease_id=command.lease_id,
        )
        return Response(s.CommandSerializer(command).data)


class UsageView(AgentView):
    @extend_schema(
        request=s.UsageReportSerializer,
        responses=s.AckedSerializer,
        summary="A usage report; (node, boot_epoch, seq) makes a repeat harmless",
    )
    def post(self, request: Request) -> Response:
        node = self.node(request)
        try:
            report = parse_report(request.data)
        except NodeError as exc:
            metrics.usage_reports("refused", node=node.name)
            raise refused(exc) from exc
        # The insert says whether the report is new (ON CONFLICT DO NOTHING counts the rows it stored): no
        # separate look-up, and no race between a look-up and the insert.
        seen = not usage_ingest(reports=[(node.pk, report)])
        metrics.usage_reports(
            "duplicate" if seen else "ingested",
            node=node.name,
            samples=0 if seen else len(report.gpus),
            lag_s=(timezone.now() - report.sent_at).total_seconds(),
            epoch=report.boot_epoch,
            seq=report.seq,
        )
        return Response({"acked": report.seq})


class LeaseStartedView(AgentView):
    @extend_schema(
        request=s.StartedSerializer,
        responses={200: s.LeaseReplySerializer, 404: _NOT_YOURS},
        summary="The lease's job started (idempotent)",
    )
    def post(self, request: Request, lease_id: int) -> Response:
        lease = node_lease(node=self.node(request), lease_id=lease_id)
        body = s.StartedSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        lease = lease_started(lease=lease, at=body.validated_data["at"])
        return Response(s.LeaseReplySerializer(lease).data)


class LeaseExitedView(AgentView):
    @extend_schema(
        request=s.ExitedSerializer,
        responses={200: s.LeaseReplySerializer, 404: _NOT_YOURS},
        summary="The lease's job exited: settled once for what was measured (idempotent)",
    )
    def post(self, request: Request, lease_id: int) -> Response:
        node = self.node(request)
        lease = node_lease(node=node, lease_id=lease_id)
        body = s.ExitedSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        try:
            usage = None if v["usage"] is None else parse_counters(v["usage"], lease=lease.pk)
        except NodeError as exc:
            raise refused(exc) from exc
        lease = lease_exited(
            node=node,
            lease=lease,
            exit_code=v["exit_code"],
            signal=v["signal"],
            stopped_by=v["stopped_by"],
            usage=usage,
        )
        return Response(s.LeaseReplySerializer(lease).data)
