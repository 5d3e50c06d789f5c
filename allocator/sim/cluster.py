"""The simulated cluster: nodes of each pool, their GPU slots, and who holds each slot."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from allocator.sim.scenario import Scenario

IntArray = npt.NDArray[np.int64]


class Cluster:
    """Nodes are numbered across pools in scenario order; a slot is one GPU on one node."""

    def __init__(self, scenario: Scenario) -> None:
        pool_of_node = [i for i, p in enumerate(scenario.pools) for _ in range(p.nodes)]
        self.node_pool: IntArray = np.array(pool_of_node, dtype=np.int64)
        self.node_size: IntArray = np.array(
            [scenario.pools[i].gpus_per_node for i in pool_of_node], dtype=np.int64
        )
        self.width = int(self.node_size.max())
        # owner[node, slot] is the job holding that GPU, -1 when free, -2 where the node has no such slot.
        self.owner: IntArray = np.full((len(pool_of_node), self.width), -1, dtype=np.int64)
        self.owner[np.arange(self.width)[None, :] >= self.node_size[:, None]] = -2
        self.free: IntArray = self.node_size.copy()
        self.pool_gpus: IntArray = np.array([p.gpus for p in scenario.pools], dtype=np.int64)

    def nodes_of(self, pool: int) -> IntArray:
        return np.flatnonzero(self.node_pool == pool)

    def free_in(self, pool: int) -> int:
        return int(self.free[self.node_pool == pool].sum())

    def take(self, job: int, node: int, count: int) -> IntArray:
        """Give `count` free slots of `node` to `job`, lowest slots first; returns the slots."""
        slots = np.flatnonzero(self.owner[node] == -1)[:count]
        if len(slots) < count:
            raise RuntimeError(f"node {node} has {len(slots)} free GPUs, {count} asked")
        self.owner[node, slots] = job
        self.free[node] -= count
        return slots

    def take_slots(self, job: int, nodes: IntArray, slots: IntArray) -> None:
        """Give exact (node, slot) GPUs to `job`, as a placement from the allocator names them."""
        if np.any(self.owner[nodes, slots] != -1):
            raise RuntimeError(
                f"job {job} placed on GPUs that are not free: {list(zip(nodes, slots, strict=True))}"
            )
        self.owner[nodes, slots] = job
        np.subtract.at(self.free, nodes, 1)

    def release(self, nodes: IntArray, slots: IntArray) -> None:
        self.owner[nodes, slots] = -1
        np.add.at(self.free, nodes, 1)


def place_gang(free: IntArray, k: int) -> list[tuple[int, int]] | None:
    """Where a baseline puts a gang of k GPUs, given free GPUs per candidate node (indices into `free`).

    One node when some node fits it, best fit (fewest free GPUs left over) so large holes stay open;
    otherwise spread over the fewest nodes, most free first. Mirrors §Clearing step 5 closely enough that
    the baselines fragment the cluster the way the market does, without being the market's placement.
    """
    if k <= 0 or int(free.sum()) < k:
        return None
    fits = np.flatnonzero(free >= k)
    if len(fits):
        best = fits[np.argmin(free[fits])]
        return [(int(best), k)]
    order = np.argsort(-free, kind="stable")
    taken: list[tuple[int, int]] = []
    left = k
    for node in order:
        use = min(int(free[node]), left)
        taken.append((int(node), use))
        left -= use
        if left == 0:
            break
    return taken
