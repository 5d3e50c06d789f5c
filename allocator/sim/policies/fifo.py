"""The baselines operators run today: fixed per-tenant quotas, and one shared FIFO queue.

Both keep strict FIFO with head-of-line blocking (the Helios SC'21 FIFO baseline): a job that does not fit
holds back every job behind it in its queue. Neither looks at bids; both charge each type's reserve price.
"""

from __future__ import annotations

import numpy as np

from allocator.sim.cluster import IntArray, place_gang
from allocator.sim.policies.base import Policy
from allocator.sim.state import Decision, SimState, Start


class _Fifo(Policy):
    """Shared machinery: try a job's acceptable types best first on a view of free GPUs per node."""

    def _begin_round(self) -> None:
        # Slots given away earlier in this round are not yet in the cluster, so track them on a copy.
        self._owner = self.state.cluster.owner.copy()
        self._available: dict[int, int | None] = {}

    def _affordable(self, job: int, pool: int) -> bool:
        """Holds taken earlier in this round count against the balance, as the ledger would count them."""
        tenant = int(self.state.jobs.tenant[job])
        if tenant not in self._available:
            self._available[tenant] = self.state.available_micro(tenant)
        balance = self._available[tenant]
        return balance is None or balance >= self.state.hold_micro(job, self.state.reserve_by_pool[pool])

    def _unaffordable(self, job: int) -> bool:
        """A job its tenant cannot pay for at any acceptable reserve never runs; it must not block the queue."""
        return not any(self._affordable(job, pool) for pool in self.state.jobs.prefs[job])

    def _take_hold(self, job: int, pool: int) -> None:
        tenant = int(self.state.jobs.tenant[job])
        balance = self._available.get(tenant)
        if balance is not None:
            self._available[tenant] = balance - self.state.hold_micro(job, self.state.reserve_by_pool[pool])

    def _try_start(self, job: int, free: IntArray, now: int) -> Start | None:
        state = self.state
        for pool in state.jobs.prefs[job]:
            if not self._affordable(job, pool):
                continue
            nodes = state.cluster.nodes_of(pool)
            placed = place_gang(free[nodes], int(state.jobs.gpus[job]))
            if placed is None:
                continue
            picked = [(int(nodes[i]), count) for i, count in placed]
            return self._start(job, pool, picked, free)
        return None

    def _start(self, job: int, pool: int, picked: list[tuple[int, int]], free: IntArray) -> Start:
        self._take_hold(job, pool)
        owner = self._owner
        node_list: list[int] = []
        slot_list: list[int] = []
        for node, count in picked:
            free[node] -= count
            slots = np.flatnonzero(owner[node] == -1)[:count]
            owner[node, slots] = job
            node_list += [node] * count
            slot_list += slots.tolist()
        return Start(
            job=job,
            pool=pool,
            nodes=np.array(node_list, dtype=np.int64),
            slots=np.array(slot_list, dtype=np.int64),
            price_micro=self.state.reserve_by_pool[pool],
        )


class PooledFifo(_Fifo):
    """One strict FIFO queue over all GPUs; no guarantees, no weights, no prices."""

    name = "pooled-fifo"

    def decide(self, now: int) -> Decision:
        self._begin_round()
        free = self.state.cluster.free.copy()
        decision = Decision()
        for job in list(self.state.waiting):
            if self._unaffordable(job):
                decision.reject.append((job, "budget exhausted"))
                continue
            start = self._try_start(job, free, now)
            if start is None:
                break  # head-of-line blocking
            decision.starts.append(start)
        return decision


class StaticQuota(_Fifo):
    """Each tenant runs only on its own guaranteed GPUs, one strict FIFO queue per tenant.

    The guarantees are carved out of the nodes once: whole nodes first (largest guarantees first) so gangs
    can land, then the remainders best fit, as a fixed-quota cluster would be laid out.
    """

    name = "static"

    def __init__(self, state: SimState) -> None:
        super().__init__(state)
        self.cap = _carve_partitions(state)  # [tenant, node] GPUs of the node that belong to the tenant

    def admit(self, job: int) -> str | None:
        reason = super().admit(job)
        if reason is not None:
            return reason
        state = self.state
        tenant = int(state.jobs.tenant[job])
        quota = [int(self.cap[tenant, state.cluster.node_pool == p].sum()) for p in state.jobs.prefs[job]]
        if max(quota) == 0:
            return "tenant has no guarantee on an acceptable GPU type"
        if int(state.jobs.gpus[job]) > max(quota):
            return "needs more GPUs than the tenant's guarantee of any acceptable type"
        return None

    def decide(self, now: int) -> Decision:
        self._begin_round()
        used = self._used_by_tenant()
        decision = Decision()
        blocked: set[int] = set()
        for job in list(self.state.waiting):
            tenant = int(self.state.jobs.tenant[job])
            if tenant in blocked:
                continue
            if self._unaffordable(job):
                decision.reject.append((job, "budget exhausted"))
                continue
            free = np.minimum(self.cap[tenant] - used[tenant], self.state.cluster.free)
            start = self._try_start(job, free, now)
            if start is None:
                blocked.add(tenant)  # head-of-line blocking within the tenant's own queue
                continue
            np.add.at(used[tenant], start.nodes, 1)
            decision.starts.append(start)
        return decision

    def _used_by_tenant(self) -> IntArray:
        owner = self.state.cluster.owner
        held = owner >= 0
        used = np.zeros_like(self.cap)
        tenants = self.state.jobs.tenant[owner[held]]
        nodes = np.nonzero(held)[0]
        np.add.at(used, (tenants, nodes), 1)
        return used


def _carve_partitions(state: SimState) -> IntArray:
    scenario = state.scenario
    cluster = state.cluster
    cap = np.zeros((len(scenario.tenants), len(cluster.node_pool)), dtype=np.int64)
    for pool_index, pool in enumerate(scenario.pools):
        nodes = cluster.nodes_of(pool_index)
        left = cluster.node_size[nodes].copy()
        want = [t.guaranteed.get(pool.gpu_type, 0) for t in scenario.tenants]
        order = sorted(range(len(want)), key=lambda t: -want[t])
        remainder: dict[int, int] = {}
        for tenant in order:
            whole, remainder[tenant] = divmod(want[tenant], pool.gpus_per_node)
            for i in np.flatnonzero(left == pool.gpus_per_node)[:whole]:
                cap[tenant, nodes[i]] = pool.gpus_per_node
                left[i] = 0
            remainder[tenant] += pool.gpus_per_node * (whole - int((cap[tenant, nodes] > 0).sum()))
        for tenant in sorted(remainder, key=lambda t: -remainder[t]):
            need = remainder[tenant]
            while need > 0:
                fits = np.flatnonzero(left >= need)
                i = int(fits[np.argmin(left[fits])]) if len(fits) else int(np.argmax(left))
                give = min(need, int(left[i]))
                cap[tenant, nodes[i]] += give
                left[i] -= give
                need -= give
    return cap
