"""The agent API under /api/v1/agent/ (docs/agent.md §Protocol). Views parse, call a service, serialize.

Every view authenticates with NodeAuthentication only (a tenant's API token is not an agent secret) and reaches
leases and commands through selectors scoped to the calling node: anything else is 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config import metrics, slots
from config.parsers import AgentJSONParser
from inventory.models import Node
from market.models import Command
from market.selectors.policy import current_fence
from market.services import command_wake
from nodeagent.api import long_poll
from nodeagent.api import serializers as s
from nodeagent.api.auth import IsNode, NodeAuthentication, agent_of
from nodeagent.api.errors import refused
from nodeagent.errors import NodeError
from nodeagent.selectors.nodes import node_command, node_lease, pending_commands
from nodeagent.services import pacing
from nodeagent.services.heartbeat import GpuHealth, node_guard_events, node_heartbeat
from nodeagent.services.lease_events import command_ack, lease_exited, lease_started
from nodeagent.services.registration import node_capabilities_save, node_register, node_reregister
from nodeagent.services.report import Ack, AgentReport, Exited, Started, report_apply
from nodeagent.services.usage import usage_ingest
from nodeagent.services.usage_parse import MAX_LEASES, parse_counters, parse_report, parse_samples

T = TypeVar("T")

_NOT_YOURS = OpenApiResponse(description="Not this node's (another node's lease or command, or none at all).")
PROTOCOL = 2  # the newest agent protocol this server speaks (docs/agent.md §Protocol 2)


def deprecated(response: Response) -> Response:
    """A protocol 1 request: answered as before for one release, marked so (RFC 9745)."""
    response["Deprecation"] = "true"
    return response


class AgentView(APIView):
    authentication_classes = [NodeAuthentication]
    # Plain floats (measurements, not amounts), gzip or not (config/parsers.py).
    parser_classes = [AgentJSONParser]
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
        address = body.validated_data.get("address")
        try:
            if isinstance(request.auth, Node):
                done = node_reregister(node=request.auth, agent_version=version, gpus=gpus, address=address)
            else:
                registered = node_register(
                    raw_token=agent_of(request).raw,
                    name=body.validated_data.get("name", ""),
                    agent_version=version,
                    gpus=gpus,
                    address=address or "",
                )
                if registered is None:  # another registration claimed the token meanwhile
                    raise exceptions.AuthenticationFailed("Invalid, used or expired bootstrap token.")
                done = registered
        except NodeError as exc:
            raise refused(exc) from exc
        node_capabilities_save(node=done.node, capabilities=body.validated_data["capabilities"])
        pace = pacing.pace()
        data = {
            "node": done.node.pk,
            "name": done.node.name,
            "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS,
            "poll_seconds": pace.poll_seconds,
            "protocol": PROTOCOL,
            "report_seconds": pace.report_seconds,
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
        node_guard_events(node=node, events=v["events"])
        reply = {"state": node.state, "fence": current_fence(), "server_time": timezone.now()}
        return deprecated(Response(s.HeartbeatReplySerializer(reply).data))


class ReportView(AgentView):
    """Protocol 2: one request for everything the agent has to say (nodeagent.services.report)."""

    @extend_schema(
        request=s.ReportSerializer,
        responses=s.ReportReplySerializer,
        summary="Everything since the last report (the heartbeat); the answer paces the next",
    )
    def post(self, request: Request) -> Response:
        node = self.node(request)
        v = s.check_report(request.data)  # ReportSerializer's rules, faster (its docstring says how)
        try:
            report = _report(v)
        except NodeError as exc:
            metrics.usage_reports("refused", node=node.name)
            raise refused(exc) from exc
        outcome = report_apply(node=node, report=report)
        for command in outcome.acked:
            metrics.agent_command(
                "refused" if command.result == "refused" else "acked",
                kind=command.kind,
                node=node.name,
                command_id=command.pk,
                lease_id=command.lease_id,
            )
        ticks = len(report.samples.t) if report.samples is not None else 0
        metrics.usage_reports(
            "ingested" if outcome.new else "duplicate",
            node=node.name,
            samples=ticks * len(report.samples.gpus) if outcome.new and report.samples is not None else 0,
            lag_s=(timezone.now() - report.sent_at).total_seconds(),
            epoch=report.boot_epoch,
            seq=report.seq,
        )
        pace = pacing.pace()
        reply: dict[str, Any] = {
            "acked": report.seq,
            "state": outcome.node.state,
            "fence": pacing.answer_fence(),
            "server_time": _INSTANT.to_representation(timezone.now()),
            "report_seconds": pace.report_seconds,
            "poll_seconds": pace.poll_seconds,
        }
        if outcome.ignored:
            reply["ignored"] = outcome.ignored
        if outcome.refused:
            reply["refused"] = outcome.refused
        # The answer as ReportReplySerializer documents it, built directly: running the serializer on every
        # report cost half a millisecond of the web worker's CPU (tests/nodeagent/test_report.py checks the shape).
        return Response(reply)


_INSTANT = serializers.DateTimeField()


def _lease_id(item: Any) -> int:
    """The entry's lease id as sent, else 0, which parse_counters refuses naming `leases[i].lease`."""
    lease = item.get("lease") if type(item) is dict else None
    return lease if type(lease) is int else 0


def _report(v: dict[str, Any]) -> AgentReport:
    """The validated body as the service's report; the samples and counters checked here (NodeError naming
    the field)."""
    leases = v["leases"] if v["leases"] is not None else []
    if type(leases) is not list:
        raise NodeError("must be a list", field="leases")
    if len(leases) > MAX_LEASES:
        raise NodeError(f"has {len(leases)} entries; at most {MAX_LEASES}", field="leases")
    counters = [
        parse_counters(item, lease=_lease_id(item), path=f"leases[{i}]") for i, item in enumerate(leases)
    ]
    exited = []
    for i, e in enumerate(v["exited"]):
        usage = (
            None
            if e["usage"] is None
            else parse_counters(e["usage"], lease=e["lease"], path=f"exited[{i}].usage")
        )
        exited.append(
            Exited(
                lease=e["lease"],
                exit_code=e["exit_code"],
                at=e["at"],
                signal=e["signal"],
                stopped_by=e["stopped_by"],
                reason=e["reason"],
                usage=usage,
            )
        )
    return AgentReport(
        boot_epoch=v["boot_epoch"],
        seq=v["seq"],
        sent_at=v["sent_at"],
        gpus=[GpuHealth(uuid=g["uuid"], healthy=g["healthy"], error=g["error"]) for g in v["gpus"]],
        running=v["running"],
        events=v["events"],
        acks=[Ack(command=a["command"], result=a["result"], detail=a["detail"]) for a in v["acks"]],
        started=[Started(lease=x["lease"], at=x["at"]) for x in v["started"]],
        exited=exited,
        samples=None if v["usage"] is None else parse_samples(v["usage"], path="usage"),
        leases=counters,
    )


class CommandsView(AgentView):
    """Served by an async function (as_view) so that a waiting poll holds no worker and no database
    connection: DRF's own dispatch checks the credential, throttle and query in a thread, the wait happens in
    the event loop (nodeagent.api.long_poll), and the answer is DRF's response. Errors, schema and JSON are
    those of any other agent view."""

    @extend_schema(
        parameters=[s.CommandsQuerySerializer],
        responses=s.CommandsSerializer,
        summary="Pending commands after `after`, in id order; `wait` long-polls up to 25 s",
    )
    def get(self, request: Request) -> Response:
        query = s.CommandsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        poll = _Poll(self.node(request), query.validated_data["after"], query.validated_data["wait"])
        if not poll.wait:
            return Response(poll.answer(pending_commands(node=poll.node, after=poll.after)))
        response = Response()
        response.poll = poll  # type: ignore[attr-defined]  # picked up by the async view below
        return response

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        checked = super().as_view(**initkwargs)

        async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            try:
                async with slots.held(
                    "agent"
                ):  # config/slots.py: a slot while it checks, none while it waits
                    response = await sync_to_async(_checked_then_released(checked))(request, *args, **kwargs)
            except slots.Busy:
                metrics.agent_request_shed()
                return JsonResponse(
                    slots.BUSY, status=503, headers={"Retry-After": str(slots.BUSY_RETRY_AFTER_S)}
                )
            poll = getattr(response, "poll", None)
            if poll is None:  # answered at once (wait=0) or refused (401, 403, 400, 429)
                return response
            loop = asyncio.get_running_loop()
            find = sync_to_async(_released(partial(pending_commands, node=poll.node, after=poll.after)))

            async def look() -> list[Command]:
                async with slots.held("look"):  # its own lane: config/slots.py says why
                    return await find()

            commands = await long_poll.wait_for(
                channel=command_wake.channel(poll.node.pk), deadline=loop.time() + poll.wait, look=look
            )
            response.data = poll.answer(commands)
            return response

        view.__dict__.update(checked.__dict__)  # cls, initkwargs, csrf_exempt: the schema reads them
        return view


@dataclass(frozen=True)
class _Poll:
    node: Node
    after: int
    wait: int

    def answer(self, commands: list[Command]) -> Any:
        for command in commands:
            metrics.agent_command(
                "fetched",
                kind=command.kind,
                node=self.node.name,
                command_id=command.pk,
                lease_id=command.lease_id,
            )
        return s.CommandsSerializer({"commands": commands}).data


def _release_connection() -> None:
    """Hand the thread's database connection back (to the pool, under ASGI) so that none waits with the
    poll; a test's transaction keeps its own."""
    if not connection.in_atomic_block:
        connection.close()


def _released(fn: Callable[..., T]) -> Callable[..., T]:
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            _release_connection()

    return run


def _checked_then_released(view: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        response = view(*args, **kwargs)
        if getattr(response, "poll", None) is not None:
            _release_connection()
        return response

    return run


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
        return deprecated(Response(s.CommandSerializer(command).data))


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
        return deprecated(Response({"acked": report.seq}))


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
        lease = lease_started(node=self.node(request), lease=lease, at=body.validated_data["at"])
        return deprecated(Response(s.LeaseReplySerializer(lease).data))


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
            reason=v["reason"],
        )
        return deprecated(Response(s.LeaseReplySerializer(lease).data))
