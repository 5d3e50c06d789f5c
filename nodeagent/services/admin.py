"""Platform admins' node actions: drain, resume, retire. Audited; a refused action writes nothing."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from accounts.audit import audit
from accounts.models import User
from inventory.addresses import check_node_address
from inventory.models import Node
from market.models import LIVE_LEASE_STATES, LeaseGpu, LeaseState
from nodeagent.errors import NodeError


def require_admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may manage nodes.")
    return actor


def _locked(node: Node) -> Node:
    return Node.objects.select_for_update(no_key=True).get(pk=node.pk)


def _set_state(node: Node, actor: User, action: str, **fields: object) -> Node:
    before = node.state
    for name, value in fields.items():
        setattr(node, name, value)
    node.save(update_fields=list(fields))
    audit(actor=actor, tenant=None, action=action, detail={"node": node.name, "state": [before, node.state]})
    return node


@transaction.atomic
def node_drain(*, node: Node, actor: User | None) -> Node:
    """No new work for the node; its running leases finish. Draining a draining node changes nothing."""
    admin = require_admin(actor)
    node = _locked(node)
    if node.retired_at is not None:
        raise NodeError(f"node {node.name} is retired", code="node_retired")
    if node.drained_at is not None:
        return node
    state = Node.State.DOWN if node.state == Node.State.DOWN else Node.State.DRAINING
    return _set_state(node, admin, "node.drain", state=state, drained_at=timezone.now())


@transaction.atomic
def node_resume(*, node: Node, actor: User | None) -> Node:
    """Undo a drain: the node takes new work again (once it is up)."""
    admin = require_admin(actor)
    node = _locked(node)
    if node.retired_at is not None:
        raise NodeError(f"node {node.name} is retired", code="node_retired")
    if node.drained_at is None:
        return node
    state = Node.State.DOWN if node.state == Node.State.DOWN else Node.State.UP
    return _set_state(node, admin, "node.resume", state=state, drained_at=None)


@transaction.atomic
def node_set_address(*, node: Node, actor: User | None, address: str) -> Node:
    """An admin's address for the node (checked: inventory.addresses), pinned so that the agent's
    registrations no longer replace it; "" unpins it (the agent's next registration sets it). Gangs already
    bound keep the address their binds carried."""
    admin = require_admin(actor)
    try:
        address = check_node_address(address)
    except ValueError as exc:
        raise NodeError(str(exc), field="address") from None
    node = _locked(node)
    before = node.address
    node.address, node.address_pinned = address, bool(address)
    node.save(update_fields=["address", "address_pinned"])
    audit(
        actor=admin,
        tenant=None,
        action="node.address",
        detail={"node": node.name, "address": [before, address], "by": "admin"},
    )
    return node


def live_lease_ids(node: Node) -> list[int]:
    """Leases not yet settled with a GPU on the node (a stopping lease counts: its job may still run)."""
    live = (*LIVE_LEASE_STATES, LeaseState.STOPPING)
    return sorted(
        set(LeaseGpu.objects.filter(gpu__node=node, lease__state__in=live).values_list("lease_id", flat=True))
    )


@transaction.atomic
def node_retire(*, node: Node, actor: User | None) -> Node:
    """No work at all, for good: only once no lease lives on it (drain it first), else NodeError (409)."""
    admin = require_admin(actor)
    node = _locked(node)
    if node.retired_at is not None:
        return node
    live = live_lease_ids(node)
    if live:
        raise NodeError(
            f"node {node.name} still has live leases {live}; drain it and wait for them to end",
            code="node_busy",
        )
    return _set_state(node, admin, "node.retire", state=Node.State.RETIRED, retired_at=timezone.now())
