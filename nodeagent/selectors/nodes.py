"""Reads for the agent API (scoped to the calling node) and the admins' node list with its latest reports."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from inventory.models import Gpu, Node
from market.models import Command, CommandKind, CommandState, Lease, LeaseState
from market.selectors.usage_samples import LatestReport, latest_samples

COMMANDS_PER_FETCH = 100


def node_lease(*, node: Node, lease_id: int) -> Lease:
    """A lease with a GPU on this node; any other lease is 404, so a node cannot learn of others' leases."""
    lease = Lease.objects.filter(pk=lease_id, lease_gpus__gpu__node=node).distinct().first()
    if lease is None:
        raise Http404("No such lease on this node.")
    return lease


def node_command(*, node: Node, command_id: int) -> Command:
    command = Command.objects.filter(pk=command_id, node=node).first()
    if command is None:
        raise Http404("No such command for this node.")
    return command


def pending_commands(*, node: Node, after: int) -> list[Command]:
    """The node's unacknowledged commands after `after`, in id order. A bind whose lease was settled
    meanwhile (the node was declared lost) is left out: it must not start a job nobody pays for; so is one
    whose lease is being stopped (a gang one of whose parts failed or could not start, a cancel before the
    start): the stop that follows it is refused as "no job", which ends that part unstarted
    (market.services.lease_parts)."""
    return list(
        Command.objects.filter(node=node, state=CommandState.PENDING, pk__gt=after)
        .exclude(kind=CommandKind.BIND, lease__state__in=[LeaseState.ENDED, LeaseState.STOPPING])
        .order_by("pk")[:COMMANDS_PER_FETCH]
    )


def node_list(*, state: str | None = None) -> QuerySet[Node]:
    """Every node with its GPUs (present first, by index), by name."""
    qs = Node.objects.select_related("gpu_type").prefetch_related(
        Prefetch("gpus", queryset=Gpu.objects.order_by("absent", "index"), to_attr="gpu_rows")
    )
    if state:
        qs = qs.filter(state=state)
    return qs.order_by("name")


def latest_reports(*, node_ids: list[int]) -> dict[int, LatestReport]:
    """Each node's newest samples (market.selectors.usage_samples.latest_samples), for a page of the admins'
    list."""
    return latest_samples(node_ids=node_ids)
