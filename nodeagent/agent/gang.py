"""A job's place in its gang, as its environment says it (docs/agent.md §Multi-node gangs, docs/jobs.md).

The bind's `gang` object (rank, node count, GPUs per node, every node's address, the rendezvous) becomes
variables in two conventions: the platform's own GPUMARKET_* names, and those torchrun and torch.distributed
read (MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, and WORLD_SIZE / RANK / LOCAL_RANK for one process per
node; torchrun sets the last three itself for the processes it starts). Also: the address this node registers
(where the other parts reach it). Standard library only, like the rest of the agent.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any
from urllib.parse import urlsplit

RULE = "an IPv4 or IPv6 address or a host name"
# What a node address in a bind may hold: the server checked it (or fell back to the node's name, which may
# hold an underscore); the agent only makes sure nothing else reaches the job's environment.
_BOUND_ADDRESS = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")


def check_address(text: str) -> str:
    """The address as the server will store it (inventory.addresses holds the same rule), or ValueError."""
    text = text.strip()
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        host = text.lower().removesuffix(".")
        labels = host.split(".")
        ok = 0 < len(host) <= 253 and all(
            0 < len(label) <= 63
            and label.replace("-", "").isalnum()
            and label.isascii()
            and not label.startswith("-")
            and not label.endswith("-")
            for label in labels
        )
        if not ok or labels[-1].isdigit():
            raise ValueError(f"{text!r} is not {RULE}") from None
        return host
    if ip.is_unspecified or ip.is_multicast:
        raise ValueError(f"{text} is not an address other nodes can reach")
    return str(ip)


def default_address(server: str) -> str:
    """The local address this machine uses to reach the server: the interface the other nodes of a gang
    most likely reach it on too. A UDP "connect" sends nothing; it only picks the route."""
    parts = urlsplit(server)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as probe:
            probe.connect(info[4])
            return str(probe.getsockname()[0])
    except OSError:
        return ""


def gang_environment(gang: dict[str, Any] | None) -> dict[str, str]:
    """The variables of the job's place in its gang; a bind from a server before gangs (no `gang`) is a
    gang of one on this node."""
    gang = gang or {}
    rank = int(gang.get("rank", 0))
    nnodes = int(gang.get("nnodes", 1))
    nodes = [str(n) for n in gang.get("nodes") or ["127.0.0.1"]]
    addr = str(gang.get("rdzv_addr") or nodes[0])
    port = str(int(gang.get("rdzv_port", 29500)))
    per_node = str(int(gang.get("gpus_per_node", 0)))
    return {
        "GPUMARKET_NODE_RANK": str(rank),
        "GPUMARKET_NNODES": str(nnodes),
        "GPUMARKET_GPUS_PER_NODE": per_node,
        "GPUMARKET_GANG_GPUS": str(int(gang.get("gang_gpus", 0))),
        "GPUMARKET_NODES": ",".join(nodes),
        "GPUMARKET_RDZV_ADDR": addr,
        "GPUMARKET_RDZV_PORT": port,
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
        "NNODES": str(nnodes),
        "NODE_RANK": str(rank),
        "WORLD_SIZE": str(nnodes),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


def _bound_address(value: object) -> str:
    if not isinstance(value, str) or not _BOUND_ADDRESS.match(value):
        raise ValueError(f"gang: {value!r} is not a node address")
    return value


def bind_gang(raw: object) -> dict[str, Any] | None:
    """The bind's `gang`, checked so that the job's environment holds only numbers and addresses; a
    malformed one refuses the bind (TypeError, KeyError or ValueError: the daemon says "malformed command").
    None: a server from before gangs sent none."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TypeError("gang must be an object")
    nodes = [_bound_address(n) for n in raw.get("nodes") or []]
    rank, nnodes, port = int(raw["rank"]), int(raw["nnodes"]), int(raw["rdzv_port"])
    if not 0 <= rank < nnodes or (nodes and len(nodes) != nnodes) or not 0 < port < 65536:
        raise ValueError(f"gang: rank {rank} of {nnodes} nodes ({len(nodes)} listed), port {port}")
    return {
        "rank": rank,
        "nnodes": nnodes,
        "gpus_per_node": int(raw.get("gpus_per_node", 0)),
        "gang_gpus": int(raw.get("gang_gpus", 0)),
        "nodes": nodes,
        "rdzv_addr": _bound_address(raw["rdzv_addr"]),
        "rdzv_port": port,
    }
