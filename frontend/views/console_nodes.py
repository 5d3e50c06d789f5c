"""Console: nodes with their GPUs' health and utilisation, and the admins' node actions.

Every write goes through the node agent's services (nodeagent.services.admin, registration), which check the
admin, audit and refuse; this module only parses the form and shows the outcome. The bootstrap token form is
checked by the node API's own serializer, so the messages are the API's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from frontend.access import admin_only, page
from frontend.forms import flatten
from inventory.models import Gpu, GpuType, Node
from market.models import LIVE_LEASE_STATES, Lease, LeaseGpu, LeaseState
from nodeagent.api.serializers import BootstrapCreateSerializer
from nodeagent.errors import NodeError
from nodeagent.selectors.nodes import latest_reports, node_list
from nodeagent.services import admin as services
from nodeagent.services.registration import bootstrap_token_create

PAGE_SIZE = 50
ACTIONS: dict[str, Callable[..., Node]] = {
    "drain": services.node_drain,
    "resume": services.node_resume,
    "retire": services.node_retire,
}
DONE = {"drain": "drained: it takes no new work", "resume": "resumed", "retire": "retired"}


def _rows(nodes: list[Node]) -> list[dict[str, Any]]:
    """Each node with its GPUs (health, and utilisation and memory from its newest report) and live leases."""
    reports = latest_reports(node_ids=[n.pk for n in nodes])
    # Per node, the leases not yet settled with GPUs on it (a gang on several nodes is listed on each).
    pairs = list(
        LeaseGpu.objects.filter(
            gpu__node__in=nodes, lease__state__in=[*LIVE_LEASE_STATES, LeaseState.STOPPING]
        )
        .values_list("gpu__node_id", "lease_id")
        .annotate(gpus=Count("pk"))
        .order_by("gpu__node_id", "lease_id")
    )
    by_id = Lease.objects.select_related("tenant").in_bulk({lease_id for _, lease_id, _ in pairs})
    leases: dict[int, list[tuple[Lease, int]]] = {}
    for node_id, lease_id, gpus in pairs:
        leases.setdefault(node_id, []).append((by_id[lease_id], gpus))
    rows = []
    for node in nodes:
        report = reports.get(node.pk)
        gpu_rows: list[Gpu] = node.gpu_rows  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
        gpus = [{"gpu": g, "sample": report.gpus.get(g.uuid) if report else None} for g in gpu_rows]
        rows.append(
            {
                "node": node,
                "gpus": gpus,
                "report_at": report.sent_at if report else None,
                "unhealthy": sum(1 for g in gpu_rows if not g.healthy and not g.absent),
                "leases": leases.get(node.pk, []),
                "actions": _actions(node),
                "confinement": confinement(node),
            }
        )
    return rows


def confinement(node: Node) -> list[tuple[str, bool]]:
    """What the node's agent said it enforces on a job, as (line, ok): the sandbox, and each cgroup limit it
    cannot set with why (docs/agent.md §The sandbox). Nothing fails silently: a gap is a line on the page."""
    caps = node.capabilities or {}
    # Only a node whose kernel refused the sandbox is kept to trusted tenants (market.selectors.book).
    only = ": trusted tenants' jobs only" if node.unconfined else ""
    if not caps:
        return [("no job sandbox (its agent predates it)", False)]
    if not node.sandboxed:
        return [(f"no job sandbox ({caps.get('sandbox', 'not said')}){only}", False)]
    lines = [("jobs sandboxed", True)]
    limits = caps.get("limits") or {}
    for name in ("memory", "cpu", "pids"):
        said = limits.get(name, "not said")
        if said != "enforced":
            lines.append((f"no {name} limit: {said}", False))
    return lines


def _actions(node: Node) -> list[str]:
    """The buttons a node's state allows (the services refuse the rest anyway)."""
    if node.retired_at is not None:
        return []
    return ["resume" if node.drained_at is not None else "drain", "retire"]


def _page(
    request: HttpRequest,
    *,
    form: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    issued: Any = None,
    status: int = 200,
) -> HttpResponse:
    state = request.GET.get("state", "")
    state = state if state in Node.State.values else ""
    paged = Paginator(node_list(state=state or None), PAGE_SIZE).get_page(request.GET.get("page"))
    response = page(
        request,
        "frontend/console/nodes.html",
        {
            "page": paged,
            "rows": _rows(list(paged.object_list)),
            "states": Node.State.choices,
            "state": state,
            "query": f"state={state}" if state else "",
            "types": GpuType.objects.order_by("name"),
            "form": form or {"ttl_hours": "24"},
            "errors": errors or {},
            "issued": issued,
        },
    )
    response.status_code = status
    if issued is not None:  # the secret is in this page only: keep it out of every cache
        response["Cache-Control"] = "no-store"
    return response


@admin_only
def nodes(request: HttpRequest) -> HttpResponse:
    return _page(request)


@admin_only
@require_POST
def node_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    if action == "address":
        return _set_address(request, node)
    service = ACTIONS.get(action)
    if service is None:
        raise Http404("No such node action.")
    try:
        service(node=node, actor=caller(request))
    except NodeError as exc:
        messages.error(request, f"Refused: {exc.message}.")
    else:
        messages.success(request, f"Node {node.name} {DONE[action]}.")
    return redirect("frontend:console_nodes")


def _set_address(request: HttpRequest, node: Node) -> HttpResponse:
    """Pin the node's address (where a gang's other nodes reach it), or give it back to the agent with ""."""
    try:
        node = services.node_set_address(
            node=node, actor=caller(request), address=request.POST.get("address", "")
        )
    except NodeError as exc:
        messages.error(request, f"Refused: {exc.field + ': ' if exc.field else ''}{exc.message}.")
    else:
        said = (
            f"address set to {node.address} (pinned)"
            if node.address
            else "address cleared: its agent sets it"
        )
        messages.success(request, f"Node {node.name}: {said}.")
    return redirect("frontend:console_nodes")


@admin_only
@require_POST
def bootstrap_token(request: HttpRequest) -> HttpResponse:
    """Create a one-time bootstrap token; the secret is shown in this answer and never again."""
    form = {k: request.POST.get(k, "").strip() for k in ("name", "gpu_type", "topology_domain", "ttl_hours")}
    body = BootstrapCreateSerializer(data={k: v for k, v in form.items() if v}, context={"form": True})
    if not body.is_valid():
        return _page(request, form=form, errors=flatten(body.errors), status=400)
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
        return _page(request, form=form, errors={exc.field or "form": exc.message}, status=400)
    return _page(request, issued=issued)
