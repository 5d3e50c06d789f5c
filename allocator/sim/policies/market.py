"""The platform's own clearing, driven by the simulation: each round a Book in, `allocator.clear`, a Result out.

Nothing here decides who wins. The adapter only translates simulation state into the allocator's input
(ARCHITECTURE.md §Clearing, "Inputs") and its output back into starts, preemptions and prices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import allocator
from allocator import fairshare
from allocator.book import NO_PRICE, TIER_G, Bids, Book, GpuTypes, Leases, Nodes, Tenants
from allocator.book import Policy as RoundPolicy
from allocator.result import MOVED, Result
from allocator.sim.cluster import IntArray
from allocator.sim.policies.base import Policy
from allocator.sim.state import Decision, SimState, Start

# The scenario format has no price cap; the posted price may rise to this many times the reserve.
MAX_PRICE_FACTOR = 10
# A tenant without a budget: a balance no hold in these traces comes near, still far from int64 overflow.
UNLIMITED_MICRO = 10**15


_ROUND_DEFAULTS = RoundPolicy()


@dataclass(frozen=True)
class MarketOptions:
    """What the scenario format cannot say about a market policy: the round knobs of `allocator.book.Policy`
    and each type's price cap (micro-credits per GPU-hour; a type left out is capped at MAX_PRICE_FACTOR x its
    reserve). A what-if replay (whatif/) sets them from the platform's policy or an admin's proposal."""

    # The round knobs default to the allocator's own defaults (one place: allocator.book.Policy), so a replay
    # without options runs the rules the platform runs. (They were copied here once, and max_reservations
    # stayed 4 when the allocator's became 1: the simulator's market reserved four gangs' nodes per type.)
    price_step_bp: int = _ROUND_DEFAULTS.price_step_bp
    min_runtime_s: int = _ROUND_DEFAULTS.min_runtime_s
    starve_rounds: int = _ROUND_DEFAULTS.starve_rounds
    max_reservations: int = _ROUND_DEFAULTS.max_reservations
    max_reserved_pct: int = _ROUND_DEFAULTS.max_reserved_pct
    max_price_micro: tuple[tuple[str, int], ...] = ()  # (GPU type, cap) pairs
    fair_reclaim: bool = _ROUND_DEFAULTS.fair_reclaim  # ARCHITECTURE.md §Clearing step 6
    fair_share_half_life_s: int = _ROUND_DEFAULTS.fair_share_half_life_s  # 0: no fair-share history
    fair_share_payback_s: int = _ROUND_DEFAULTS.fair_share_payback_s
    max_moves: int = _ROUND_DEFAULTS.max_moves  # consolidation (ARCHITECTURE.md §Clearing step 5)
    move_min_runtime_s: int = _ROUND_DEFAULTS.move_min_runtime_s
    move_max_lost_gpu_s: int = _ROUND_DEFAULTS.move_max_lost_gpu_s
    move_cooldown_s: int = _ROUND_DEFAULTS.move_cooldown_s
    move_restart_s: int = _ROUND_DEFAULTS.move_restart_s

    def round_policy(self) -> RoundPolicy:
        knobs: dict[str, Any] = {
            "price_step_bp": self.price_step_bp,
            "min_runtime_s": self.min_runtime_s,
            "starve_rounds": self.starve_rounds,
            "max_reservations": self.max_reservations,
            "max_reserved_pct": self.max_reserved_pct,
            "fair_reclaim": self.fair_reclaim,
            "fair_share_half_life_s": self.fair_share_half_life_s,
            "fair_share_payback_s": self.fair_share_payback_s,
            "max_moves": self.max_moves,
            "move_min_runtime_s": self.move_min_runtime_s,
            "move_max_lost_gpu_s": self.move_max_lost_gpu_s,
            "move_cooldown_s": self.move_cooldown_s,
            "move_restart_s": self.move_restart_s,
        }
        return RoundPolicy(**knobs)


class Market(Policy):
    """Three-tier clearing (guarantee, borrowed, spot) with the scenario's guarantees and weights."""

    name = "market"
    stable = False  # the posted price moves every round, so every round must be cleared
    priced = True

    def __init__(self, state: SimState, options: MarketOptions | None = None) -> None:
        super().__init__(state)
        scenario = state.scenario
        cluster = state.cluster
        options = options or MarketOptions()
        self.reserve = np.array(state.reserve_by_pool, dtype=np.int64)
        caps = dict(options.max_price_micro)
        self.max_price = np.array(
            [
                max(caps.get(t, int(r) * MAX_PRICE_FACTOR), int(r))
                for t, r in zip(scenario.types, self.reserve, strict=True)
            ],
            dtype=np.int64,
        )
        self.guarantee = np.array(
            [[t.guaranteed.get(name, 0) for name in scenario.types] for t in scenario.tenants], dtype=np.int32
        )
        self.weight = np.array([t.weight for t in scenario.tenants], dtype=np.float64)
        self.tenant_names = tuple(t.name for t in scenario.tenants)
        self.node_names = tuple(f"n{i}" for i in range(len(cluster.node_pool)))
        self.accept = np.zeros(state.jobs.price_micro.shape, dtype=np.bool_)
        for job, prefs in enumerate(state.jobs.prefs):
            self.accept[job, list(prefs)] = True
        self.limit = np.where(self.accept, state.jobs.price_micro, NO_PRICE)
        self.round_policy = options.round_policy()
        self.last: Result | None = None  # the latest round's result, for tests and diagnostics
        # The fair-share history (allocator/fairshare.py), kept between rounds as the platform keeps it.
        self.owed = np.zeros(self.guarantee.shape, dtype=np.float64)
        self.owed_at: int | None = None
        # Jobs started by backfill on a node reserved for a gang (allocator/reference/reserve.py), while they run
        self.backfilled: set[int] = set()
        self.reserved_idle = 0  # GPUs the latest round left idle on reserved nodes
        self.moved_at = np.full(len(cluster.node_pool), -1, dtype=np.int64)  # Nodes.moved_at
        self.last_now = 0

    def decide(self, now: int) -> Decision:
        self.last_now = now
        book = self.book(now)
        result = allocator.clear(book)
        self.last = result
        dt = 0 if self.owed_at is None else now - self.owed_at
        self.note_placement(book, result, dt)
        self.owed = fairshare.owed_after(book, result, dt, self.state.scenario.round_s)
        self.owed_at = now
        return self.apply(result)

    def note_placement(self, book: Book, result: Result, dt: int) -> None:
        """The placement figures since the previous round (History.placement): the idle reserved GPUs and the
        backfilled jobs that ran over ``dt``, and this round's moves."""
        figures, state = self.state.history.placement, self.state
        self.backfilled &= state.running
        figures["reserved_idle_gpu_s"] += self.reserved_idle * dt
        figures["backfilled_gpu_s"] += sum(int(state.jobs.gpus[j]) for j in self.backfilled) * dt
        self.reserved_idle = int(result.counters.get("reserved_idle_gpus", 0))
        self.backfilled |= {int(j) for j in result.backfill_job}
        moved = result.preemptions.reason == MOVED
        figures["moves"] += int(moved.sum())
        if moved.any():
            lost = book.leases.lost_gpu_s(int(book.now))[result.preemptions.row[moved]]
            figures["moved_lost_gpu_s"] += int(lost.sum())

    # ---- simulation state -> Book -------------------------------------------------------------------

    def book(self, now: int) -> Book:
        state = self.state
        return Book(
            now=now,
            round=now // state.scenario.round_s,
            types=self.gpu_types(),
            nodes=self.nodes(),
            tenants=self.tenants(),
            bids=self.bids(now),
            leases=self.leases(now),
            policy=self.round_policy,
        )

    def gpu_types(self) -> GpuTypes:
        posted = np.clip(np.array(self.state.posted_micro, dtype=np.int64), self.reserve, self.max_price)
        return GpuTypes(self.state.scenario.types, self.reserve, posted, self.max_price)

    def nodes(self) -> Nodes:
        cluster = self.state.cluster
        n = len(cluster.node_pool)
        zeros = np.zeros(n, dtype=np.int32)
        return Nodes(
            self.node_names,
            _i32(cluster.node_pool),
            zeros,
            _i32(cluster.node_size),
            cluster.owner == -1,
            self.moved_at.copy(),  # the book freezes its arrays; this one changes with each move
        )

    def tenants(self) -> Tenants:
        state = self.state
        n_tenants, n_types = self.guarantee.shape
        held = np.zeros((n_tenants, 3, n_types), dtype=np.int32)
        for job in state.running:
            held[state.jobs.tenant[job], state.lease_tier[job], state.lease_pool[job]] += state.jobs.gpus[job]
        balance = np.array(
            [_balance(state.available_micro(t)) for t in range(n_tenants)],
            dtype=np.int64,
        )
        guardrail = np.full(n_tenants, NO_PRICE, dtype=np.int64)
        return Tenants(self.tenant_names, self.weight, self.guarantee, held, balance, guardrail, self.owed)

    def bids(self, now: int) -> Bids:
        state = self.state
        jobs = np.array(state.waiting, dtype=np.int64)
        # The market does not know durations; the simulator does. By default (the exact hold rule) a bid's max
        # runtime is exactly what the job still needs (work left plus restart overhead), so its hold is the
        # real bound on its charge; other hold rules (allocator/sim/holds.py) hold max hours or a prediction.
        max_s = state.hold_need_s_many(jobs)
        return Bids(
            job=jobs,
            tenant=_i32(state.jobs.tenant[jobs]),
            gpus=_i32(state.jobs.gpus[jobs]),
            limit=self.limit[jobs].reshape(len(jobs), -1),
            max_s=np.maximum(max_s, 1),
            submit=state.jobs.submit_s[jobs],
            waited=_i32((now - state.wait_since[jobs]) // state.scenario.round_s),
        )

    def leases(self, now: int) -> Leases:
        state = self.state
        jobs = np.array(sorted(state.running), dtype=np.int64)
        if len(jobs) == 0:
            return Leases.empty()
        gpus = [state.lease_gpus[int(j)] for j in jobs]
        sizes = np.array([len(nodes) for nodes, _ in gpus], dtype=np.int64)
        tier = state.lease_tier[jobs]
        return Leases(
            lease=jobs,
            tenant=_i32(state.jobs.tenant[jobs]),
            gpu_type=_i32(state.lease_pool[jobs]),
            tier=tier.astype(np.int8),
            start=state.seg_start[jobs],
            preemptible=tier != TIER_G,
            slot_ptr=np.concatenate(([0], np.cumsum(sizes))),
            slot_node=_i32(np.concatenate([nodes for nodes, _ in gpus])),
            slot_idx=_i32(np.concatenate([slots for _, slots in gpus])),
            checkpoint=self.lease_checkpoints(jobs, now),
            # the market knows what each lease's hold pays for (its bid's max runtime, or the prediction the
            # hold rule sized it by), not the trace's duration
            expect_end=state.seg_start[jobs] + state.hold_s[jobs],
            backfill=np.array([int(j) in self.backfilled for j in jobs], dtype=np.bool_),
        )

    def lease_checkpoints(self, jobs: IntArray, now: int) -> IntArray:
        """Each running job's last checkpoint (trace seconds, SimState.last_checkpoint_at_many): what a
        preemption at `now` would roll it back to; `now` when the scenario does not checkpoint. For the
        allocator's `Leases.checkpoint` (last checkpoint per lease, default its start),
        so that preemption prefers victims that lose the least work."""
        return self.state.last_checkpoint_at_many(jobs, now)

    # ---- Result -> simulation decisions --------------------------------------------------------------

    def apply(self, result: Result) -> Decision:
        state = self.state
        for lease in result.retiered:
            state.retier(int(lease), TIER_G)
        w = result.winners
        starts = [
            Start(
                job=int(w.job[i]),
                pool=int(w.gpu_type[i]),
                nodes=_ints(w.slot_node[w.slot_ptr[i] : w.slot_ptr[i + 1]]),
                slots=_ints(w.slot_idx[w.slot_ptr[i] : w.slot_ptr[i + 1]]),
                price_micro=int(w.price[i]),
                tier=int(w.tier[i]),
            )
            for i in range(len(w))
        ]
        preempt = [int(lease) for lease in result.preemptions.lease]
        starts += self.moved_starts(result)
        return Decision(starts=starts, preempt=preempt, posted_micro=self.prices(result))

    def moved_starts(self, result: Result) -> list[Start]:
        """Consolidation: each moved lease (preempted above) starts again at once on its new GPUs, same pool,
        tier and price; it pays the restart overhead and resumes from its last checkpoint, as any preempted
        job. Both ends of a move start a node's cool-down."""
        state, m = self.state, result.moves
        out = []
        for i in range(len(m)):
            job = int(m.lease[i])  # the simulator's lease ids are its job indices
            nodes = _ints(m.slot_node[m.slot_ptr[i] : m.slot_ptr[i + 1]])
            out.append(
                Start(
                    job=job,
                    pool=int(state.lease_pool[job]),
                    nodes=nodes,
                    slots=_ints(m.slot_idx[m.slot_ptr[i] : m.slot_ptr[i + 1]]),
                    price_micro=int(state.lease_price[job]),
                    tier=int(state.lease_tier[job]),
                )
            )
            old = state.lease_gpus[job][0]
            self.moved_at[np.concatenate([nodes, old])] = self.last_now
        return out

    def prices(self, result: Result) -> list[int]:
        return [int(p) for p in result.posted]


class PureAuction(Market):
    """Highest bids win, through the same clearing: no guarantees, equal weights, and a posted price pinned
    at its cap so that no bid qualifies for tier B and every GPU is sold in tier S at the uniform price."""

    name = "pure-auction"

    def __init__(self, state: SimState) -> None:
        super().__init__(state)
        self.guarantee = np.zeros_like(self.guarantee)
        self.weight = np.ones_like(self.weight)
        self.max_price = np.maximum(self.reserve * MAX_PRICE_FACTOR, UNLIMITED_MICRO // 10**6)

    def gpu_types(self) -> GpuTypes:
        return GpuTypes(self.state.scenario.types, self.reserve, self.max_price, self.max_price)

    def prices(self, result: Result) -> list[int]:
        # What a pure auction charges is its clearing price; report that, the reserve where nothing sold.
        spot = np.asarray(result.spot_price, dtype=np.int64)
        return [int(p) for p in np.where(spot >= 0, spot, self.reserve)]


def _balance(available: int | None) -> int:
    return UNLIMITED_MICRO if available is None else max(0, available)


def _ints(values: npt.NDArray[np.integer[Any]]) -> IntArray:
    return np.asarray(values, dtype=np.int64)


def _i32(values: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.int32]:
    return values.astype(np.int32)
