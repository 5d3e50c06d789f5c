"""Registering nodes: bootstrap tokens (admins), first registration and re-registration (agents).

docs/agent.md §Protocol, `POST register`. A bootstrap token works once: it is claimed with a conditional
UPDATE inside the registration's transaction, so of two agents racing with one token exactly one registers,
and a registration refused for its body leaves the token unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.audit import audit
from accounts.models import User
from inventory.addresses import check_node_address
from inventory.models import Gpu, GpuType, Node
from inventory.models.nodes import UNCONFINED_PREFIX
from nodeagent import credentials
from nodeagent.errors import NodeError
from nodeagent.models import BootstrapToken
from nodeagent.services.admin import require_admin

BOOTSTRAP_TTL = timedelta(days=1)
BOOTSTRAP_TTL_MAX = timedelta(days=30)


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    index: int
    model: str
    memory_mb: int


@dataclass(frozen=True)
class IssuedBootstrap:
    token: BootstrapToken
    secret: str


@dataclass(frozen=True)
class Registered:
    node: Node
    credential: str | None  # only on the first registration
    created: bool


@transaction.atomic
def bootstrap_token_create(
    *,
    actor: User | None,
    name: str = "",
    gpu_type: GpuType | None = None,
    topology_domain: str = "",
    ttl: timedelta = BOOTSTRAP_TTL,
    secret: str | None = None,
) -> IssuedBootstrap:
    """A one-time token for one new node (shown once). `secret` is for the local demo only."""
    admin = require_admin(actor)
    if name and Node.objects.filter(name=name).exists():
        raise NodeError(f"a node named {name!r} is already registered", field="name")
    if not timedelta(minutes=1) <= ttl <= BOOTSTRAP_TTL_MAX:
        raise NodeError("must be between 1 minute and 30 days", field="ttl_hours")
    secret = secret or credentials.new_secret(credentials.BOOTSTRAP_PREFIX)
    token = BootstrapToken.objects.create(
        prefix=secret[:12],
        digest=credentials.digest(secret),
        name=name,
        gpu_type=gpu_type,
        topology_domain=topology_domain,
        created_by=admin,
        expires_at=timezone.now() + ttl,
    )
    audit(
        actor=admin,
        tenant=None,
        action="node.bootstrap_token",
        detail={
            "token": token.pk,
            "name": name,
            "gpu_type": gpu_type.name if gpu_type else None,
            "topology_domain": topology_domain,
            "expires_at": token.expires_at.isoformat(),
        },
    )
    return IssuedBootstrap(token=token, secret=secret)


def bootstrap_token_usable(*, raw: str, now: datetime | None = None) -> BootstrapToken | None:
    """The unused, unexpired token for this secret, or None (the authentication's check; the claim that
    counts is the conditional UPDATE in node_register)."""
    now = now or timezone.now()
    return BootstrapToken.objects.filter(
        digest=credentials.digest(raw), used_at__isnull=True, expires_at__gt=now
    ).first()


def _check_gpus(gpus: list[GpuInfo]) -> None:
    if not gpus:
        raise NodeError("must list at least one GPU", field="gpus")
    for what in ("uuid", "index"):
        seen: set[object] = set()
        for i, gpu in enumerate(gpus):
            value = getattr(gpu, what)
            if value in seen:
                raise NodeError(f"{what} {value!r} is listed twice", field=f"gpus[{i}].{what}")
            seen.add(value)


def checked_address(address: str) -> str:
    """The node address in its one spelling, or NodeError naming the field (inventory.addresses)."""
    try:
        return check_node_address(address)
    except ValueError as exc:
        raise NodeError(f"{exc}", field="address") from None


def gpu_type_for(gpus: list[GpuInfo]) -> GpuType:
    """The GPU type whose name occurs in the GPUs' model string (the longest such name: "A100" before "A1")."""
    types = sorted(GpuType.objects.all(), key=lambda t: -len(t.name))
    for i, gpu in enumerate(gpus):
        found = next((t for t in types if t.name.lower() in gpu.model.lower()), None)
        if found is None:
            known = ", ".join(sorted(t.name for t in types)) or "none"
            raise NodeError(
                f"no GPU type matches model {gpu.model!r} (known: {known}); name one in the bootstrap token",
                field=f"gpus[{i}].model",
            )
        if i == 0:
            first = found
        elif found != first:
            raise NodeError("a node's GPUs must all be of one type", field=f"gpus[{i}].model")
    return first


def _foreign_uuids(gpus: list[GpuInfo], node: Node | None) -> None:
    taken = Gpu.objects.filter(uuid__in=[g.uuid for g in gpus])
    if node is not None:
        taken = taken.exclude(node=node)
    clash = taken.values_list("uuid", flat=True).first()
    if clash is not None:
        index = next(i for i, g in enumerate(gpus) if g.uuid == clash)
        raise NodeError(
            f"GPU {clash} is registered to another node", field=f"gpus[{index}].uuid", code="gpu_registered"
        )


@transaction.atomic
def node_register(
    *,
    raw_token: str,
    name: str,
    agent_version: str,
    gpus: list[GpuInfo],
    address: str = "",
    now: datetime | None = None,
) -> Registered | None:
    """First registration with a bootstrap token. None when the token is no longer usable (another
    registration claimed it, or it expired): the caller answers 401 and nothing is written."""
    now = now or timezone.now()
    _check_gpus(gpus)
    address = checked_address(address)
    token = (
        BootstrapToken.objects.select_related("gpu_type").filter(digest=credentials.digest(raw_token)).first()
    )
    if token is None or token.used_at is not None or token.expires_at <= now:
        return None
    name = token.name or name
    if not name:
        raise NodeError("is required (the bootstrap token names none)", field="name")
    if Node.objects.filter(name=name).exists():
        raise NodeError(f"a node named {name!r} is already registered", field="name", code="node_exists")
    gpu_type = token.gpu_type or gpu_type_for(gpus)
    _foreign_uuids(gpus, None)
    # The claim: exactly one transaction gets the row count 1; the loser's whole registration rolls back.
    if not BootstrapToken.objects.filter(pk=token.pk, used_at__isnull=True).update(used_at=now):
        return None
    secret = credentials.new_secret(credentials.NODE_PREFIX)
    node = Node.objects.create(
        name=name,
        gpu_type=gpu_type,
        topology_domain=token.topology_domain or "default",
        credential_digest=credentials.digest(secret),
        agent_version=agent_version,
        address=address,
        last_heartbeat=now,
    )
    Gpu.objects.bulk_create(
        Gpu(node=node, index=g.index, uuid=g.uuid, model=g.model, memory_mb=g.memory_mb) for g in gpus
    )
    BootstrapToken.objects.filter(pk=token.pk).update(node=node)
    audit(
        actor=None,
        tenant=None,
        action="node.register",
        detail={
            "node": node.pk,
            "name": name,
            "gpus": len(gpus),
            "token": token.pk,
            "gpu_type": gpu_type.name,
            "address": address,
        },
    )
    return Registered(node=node, credential=secret, created=True)


@transaction.atomic
def node_reregister(
    *,
    node: Node,
    agent_version: str,
    gpus: list[GpuInfo],
    address: str | None = None,
    now: datetime | None = None,
) -> Registered:
    """A registered node reports its GPUs again: new UUIDs join, missing ones become absent (no new work).
    `address` (None: the agent sent none) replaces the node's, unless an admin pinned one."""
    now = now or timezone.now()
    _check_gpus(gpus)
    address = None if address is None else checked_address(address)
    node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
    _foreign_uuids(gpus, node)
    reported = {g.uuid: g for g in gpus}
    known = {g.uuid: g for g in Gpu.objects.filter(node=node)}
    gone = [uuid for uuid, g in known.items() if uuid not in reported and not g.absent]
    # Absent first, then the rest in an order that frees indices before they are taken again.
    Gpu.objects.filter(node=node, uuid__in=gone).update(absent=True)
    Gpu.objects.filter(node=node, uuid__in=list(reported)).update(absent=True)
    for info in gpus:
        Gpu.objects.update_or_create(
            uuid=info.uuid,
            defaults={
                "node": node,
                "index": info.index,
                "model": info.model,
                "memory_mb": info.memory_mb,
                "absent": False,
            },
        )
    added = sorted(set(reported) - set(known))
    node.agent_version, node.last_heartbeat = agent_version, now
    fields = ["agent_version", "last_heartbeat"]
    if address is not None and not node.address_pinned and address != node.address:
        before, node.address = node.address, address
        fields.append("address")
        audit(
            actor=None,
            tenant=None,
            action="node.address",
            detail={"node": node.name, "address": [before, address], "by": "agent"},
        )
    node.save(update_fields=fields)
    if added or gone:
        audit(
            actor=None,
            tenant=None,
            action="node.reregister",
            detail={"node": node.pk, "added": added, "absent": gone},
        )
    return Registered(node=node, credential=None, created=False)


def node_capabilities_save(*, node: Node, capabilities: dict[str, Any]) -> None:
    """What the agent said it enforces on a job, at every registration (an upgrade or a kernel change shows
    at once). Audited when it changes: a node that stops sandboxing is a node that takes only trusted tenants."""
    if node.capabilities == capabilities:
        return
    unconfined = str(capabilities.get("sandbox", "")).startswith(UNCONFINED_PREFIX)
    Node.objects.filter(pk=node.pk).update(capabilities=capabilities, unconfined=unconfined)
    audit(
        actor=None,
        tenant=None,
        action="node.capabilities",
        detail={"node": node.pk, "name": node.name, "was": node.capabilities, "now": capabilities},
    )
    node.capabilities, node.unconfined = capabilities, unconfined
