"""A gang's wiring: each node's rank, the nodes' addresses and the rendezvous (docs/agent.md §Multi-node gangs).

Pure functions over plain values: the round commit builds each bind's `gang` from them, and the lease rules
(market.services.lease_parts) and the job page read ranks the same way, so a part's rank is one rule, not a
number stored in three places.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

LOOPBACK = "127.0.0.1"  # a gang of one node meets on the node itself


def part_ranks(node_ids: Iterable[int]) -> dict[int, int]:
    """Node id -> its rank: the lease's nodes in id order. Rank 0 hosts the rendezvous."""
    return {node_id: rank for rank, node_id in enumerate(sorted(set(node_ids)))}


def rendezvous_port(lease_id: int, port_range: tuple[int, int]) -> int:
    """The lease's rendezvous port: the next port of the range for each lease, so leases placed together
    (consecutive ids) never share one on a node until the range wraps around (500 ports by default: a
    node would need 500 gangs of rank 0 at once). Deterministic, so every part and every retry agree."""
    low, high = port_range
    return low + lease_id % (high - low + 1)


def node_address(address: str, name: str, *, alone: bool) -> str:
    """Where the other parts reach this node: its registered address; for a gang of one node the loopback
    when it has none; else its name, for the resolver (a node without an address should get one)."""
    if address:
        return address
    return LOOPBACK if alone else name


def gang_payloads(
    *,
    lease_id: int,
    gpus_by_node: Mapping[int, list[str]],
    addresses: Mapping[int, tuple[str, str]],
    port_range: tuple[int, int],
) -> dict[int, dict[str, object]]:
    """Node id -> the `gang` object of its bind: rank, node count, GPUs per node, every node's address in
    rank order, the rendezvous address (rank 0's) and port. `addresses`: node id -> (address, name)."""
    ranks = part_ranks(gpus_by_node)
    alone = len(ranks) == 1
    nodes = [node_address(*addresses[node_id], alone=alone) for node_id in ranks]
    port = rendezvous_port(lease_id, port_range)
    return {
        node_id: {
            "rank": rank,
            "nnodes": len(ranks),
            "gpus_per_node": len(gpus_by_node[node_id]),
            "gang_gpus": sum(len(g) for g in gpus_by_node.values()),
            "nodes": nodes,
            "rdzv_addr": nodes[0],
            "rdzv_port": port,
        }
        for node_id, rank in ranks.items()
    }
