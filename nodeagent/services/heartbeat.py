"""Liveness: heartbeats bring a node up, the timeout takes it down (docs/agent.md §Protocol, `heartbeat`).

A node down past the timeout loses its leases: each is settled for what its agents reported and its job goes
back to pending (end reason node_lost). A node that heartbeats again comes back in the state its admin left it
(up or draining); the jobs it still runs for leases that were settled meanwhile get a release command.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.audit import audit
from inventory.models import Gpu, Node
from market.models import LIVE_LEASE_STATES, Command, CommandKind, Lease, LeaseGpu, LeaseState, PartState
from market.selectors.policy import current_fence
from market.services.command_wake import commands_written
from market.services.lease_parts import part_ended
from market.services.leases import STOP_COMMAND_TTL, stop_payload
from nodeagent.services.admin import live_lease_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuHealth:
    uuid: str
    healthy: bool
    error: str


def _state_when_back(node: Node) -> str:
    if node.retired_at is not None:
        return Node.State.RETIRED
    return Node.State.DRAINING if node.drained_at is not None else Node.State.UP


@transaction.atomic
def node_heartbeat(
    *, node: Node, boot_epoch: int, gpus: list[GpuHealth], leases: list[int], now: datetime | None = None
) -> Node:
    """Record that the node is alive, its GPUs' health and the leases whose jobs it runs."""
    return node_alive(node=node, boot_epoch=boot_epoch, gpus=gpus, leases=leases, now=now)


def node_alive(
    *, node: Node, boot_epoch: int, gpus: list[GpuHealth], leases: list[int], now: datetime | None = None
) -> Node:
    """node_heartbeat in the caller's transaction (a protocol 2 report's). A node that is not down (every
    report but the first after an outage) is one conditional UPDATE: it takes the row's lock as the
    SELECT ... FOR UPDATE did, and nodes_mark_down's own conditional UPDATE waits for it and then finds the
    node heard from; a node found down takes the full path and comes back up."""
    now = now or timezone.now()
    # Plain SQL on this path and the two below: it runs for every report of every node, and building the
    # ORM's queries cost more than running them (bench/usage.py's HTTP phase, a cProfile of the view).
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {Node._meta.db_table} SET last_heartbeat = %s, "
            "boot_epoch = CASE WHEN boot_epoch < %s THEN %s ELSE boot_epoch END WHERE id = %s AND state <> %s",
            [connection.ops.adapt_datetimefield_value(now), boot_epoch, boot_epoch, node.pk, Node.State.DOWN],
        )
        alive = cur.rowcount
    if alive:
        node.last_heartbeat, node.boot_epoch = now, max(node.boot_epoch, boot_epoch)
        _gpu_health(node, gpus)
        _release_settled(node, leases, now)
        return node
    node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
    fields = ["last_heartbeat", "boot_epoch"]
    node.last_heartbeat, node.boot_epoch = now, max(node.boot_epoch, boot_epoch)
    if node.state == Node.State.DOWN:
        node.state, node.down_since = _state_when_back(node), None
        fields += ["state", "down_since"]
        audit(actor=None, tenant=None, action="node.up", detail={"node": node.name, "state": node.state})
    node.save(update_fields=fields)
    _gpu_health(node, gpus)
    _release_settled(node, leases, now)
    return node


def _gpu_health(node: Node, gpus: list[GpuHealth]) -> None:
    """Update only the GPUs whose health changed (a heartbeat usually changes nothing)."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT uuid, healthy, error FROM {Gpu._meta.db_table} WHERE node_id = %s", [node.pk])
        current = {u: (bool(h), e) for u, h, e in cur.fetchall()}
    for gpu in gpus:
        if gpu.uuid in current and current[gpu.uuid] != (gpu.healthy, gpu.error):
            Gpu.objects.filter(node=node, uuid=gpu.uuid).update(healthy=gpu.healthy, error=gpu.error[:500])
            if not gpu.healthy:
                log.warning("node %s: GPU %s unhealthy: %s", node.name, gpu.uuid, gpu.error)


def _release_settled(node: Node, leases: list[int], now: datetime) -> None:
    """Jobs the agent runs for leases already settled (the node was declared lost meanwhile) must stop."""
    if not leases:
        return
    # Nearly always none: look by primary key first, join through the lease's GPUs only for those found.
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT id FROM {Lease._meta.db_table} WHERE id IN ({', '.join(['%s'] * len(leases))}) "
            "AND state = %s",
            [*leases, LeaseState.ENDED],
        )
        settled = [row[0] for row in cur.fetchall()]
    if not settled:
        return
    ended = Lease.objects.filter(pk__in=settled, lease_gpus__gpu__node=node).distinct()
    for lease in ended:
        _, created = Command.objects.get_or_create(
            lease=lease,
            node=node,
            kind=CommandKind.RELEASE,
            defaults={
                "payload": stop_payload(lease, CommandKind.RELEASE),
                "fence": current_fence(),
                "expires_at": now + timedelta(seconds=lease.grace_seconds) + STOP_COMMAND_TTL,
            },
        )
        if created:
            commands_written(node_ids=[node.pk])


def nodes_mark_down(*, timeout_s: int, now: datetime | None = None) -> list[int]:
    """Mark DOWN every agent-registered node silent for timeout_s, then settle its leases (node_lost).

    Each node is claimed with a conditional UPDATE, so two beats at once lose each node once. Nodes made
    without an agent (no credential) have no heartbeat to miss and are left alone.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=timeout_s)
    silent = Q(last_heartbeat__lt=cutoff) | Q(last_heartbeat__isnull=True, created_at__lt=cutoff)
    candidates = (
        Node.objects.filter(state__in=[Node.State.UP, Node.State.DRAINING])
        .exclude(credential_digest="")
        .filter(silent)
        .values_list("pk", flat=True)
    )
    lost = []
    for node_id in candidates:
        with transaction.atomic():
            claimed = (
                Node.objects.filter(pk=node_id, state__in=[Node.State.UP, Node.State.DRAINING])
                .filter(silent)
                .update(state=Node.State.DOWN, down_since=now)
            )
            if claimed:
                node = Node.objects.get(pk=node_id)
                audit(actor=None, tenant=None, action="node.down", detail={"node": node.name})
                lost.append(node_id)
        if claimed:
            node_lost(node=node, now=now)
    # A round that committed while its node was being marked down can leave a lease on a down node: settle it
    # on the next check.
    for node in Node.objects.filter(state=Node.State.DOWN, pk__in=_nodes_with_live_leases()):
        node_lost(node=node, now=now)
    return lost


def _nodes_with_live_leases() -> QuerySet[LeaseGpu, int]:
    live = (*LIVE_LEASE_STATES, LeaseState.STOPPING)
    return LeaseGpu.objects.filter(lease__state__in=live).values_list("gpu__node_id", flat=True)


def node_lost(*, node: Node, now: datetime | None = None) -> list[int]:
    """Every lease with a GPU on the node loses its part there: a lease of this node alone is settled for
    what was reported, a gang's other parts are stopped (market.services.lease_parts); their jobs go back to
    pending (node_lost, "node X (part N) down")."""
    ids = live_lease_ids(node)
    for lease_id in ids:
        part_ended(lease_id=lease_id, node_id=node.pk, state=PartState.LOST, now=now)
    if ids:
        log.warning("node %s lost: leases %s settled, their jobs requeued", node.name, ids)
    return ids


def node_guard_events(*, node: Node, events: list[dict[str, Any]]) -> None:
    """Audit what the agent did between tenants (nodeagent.agent.sandbox_gpus): a GPU drained after failing
    its check (its reason is also the GPU's error, on the console), resumed, or a foreign process killed.
    A heartbeat retried after a lost answer audits its events twice; each carries the agent's time to tell."""
    for event in events:
        audit(
            actor=None,
            tenant=None,
            action=f"node.{event['kind']}",
            detail={
                "node": node.name,
                "gpu": event["gpu"],
                "pid": event.get("pid"),
                "detail": event.get("detail", ""),
                "at": event.get("at"),
            },
        )
