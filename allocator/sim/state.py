"""Everything the simulation knows at one instant, and the only functions that change it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from allocator import lost
from allocator.sim.cluster import Cluster, IntArray
from allocator.sim.holds import STOPPED_AT_HOLD, HoldRule, sized_hold_s
from allocator.sim.jobs import Jobs
from allocator.sim.predictions import SimPredictor
from allocator.sim.scenario import Scenario

FUTURE, WAITING, RUNNING, DONE, REJECTED = 0, 1, 2, 3, 4
TIER_NONE = -1

# Why a run segment ended (History.run_ended, the `ended` column of runs.csv). The simulator ends segments only
# as completed, preempted or hold_ran_out today; it has no node failures, cancellations or rejections of
# running jobs, but the vocabulary is the platform's, so the other values are kept for when it does.
COMPLETED, PREEMPTED, NODE_DOWN, CANCELLED, REJECTED_RUN, HOLD_RAN_OUT = (
    "completed",
    "preempted",
    "node_down",
    "cancelled",
    "rejected",
    "hold_ran_out",
)
ENDINGS = (COMPLETED, PREEMPTED, NODE_DOWN, CANCELLED, REJECTED_RUN, HOLD_RAN_OUT)


@dataclass
class History:
    """Append-only record of what happened; every figure and plot is computed from it afterwards."""

    run_job: list[int] = field(default_factory=list)
    run_pool: list[int] = field(default_factory=list)
    run_start: list[int] = field(default_factory=list)
    run_end: list[int] = field(default_factory=list)
    run_tier: list[int] = field(default_factory=list)
    run_ended: list[str] = field(default_factory=list)  # one of ENDINGS
    run_lost_gpu_s: list[int] = field(default_factory=list)  # GPU-seconds of progress thrown away at the end
    wait_job: list[int] = field(default_factory=list)
    wait_start: list[int] = field(default_factory=list)
    wait_end: list[int] = field(default_factory=list)
    price_time: list[int] = field(default_factory=list)
    price_micro: list[list[int]] = field(default_factory=list)  # posted price per pool at each change
    cleared_rounds: int = 0
    # Placement figures a policy reports (the market's reservations, backfill and moves, docs/simulator.md):
    # GPU-seconds reserved and left idle, GPU-seconds run by backfilled jobs, leases moved and the GPU-seconds
    # of work those moves threw away.
    placement: dict[str, int] = field(
        default_factory=lambda: {
            "reserved_idle_gpu_s": 0,
            "backfilled_gpu_s": 0,
            "moves": 0,
            "moved_lost_gpu_s": 0,
        }
    )


@dataclass(frozen=True)
class Start:
    """A policy's decision to run a job on exact GPUs at a price per GPU-hour."""

    job: int
    pool: int
    nodes: IntArray
    slots: IntArray
    price_micro: int
    tier: int = TIER_NONE


@dataclass
class Decision:
    starts: list[Start] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    reject: list[tuple[int, str]] = field(default_factory=list)  # jobs given up on, with the reason
    posted_micro: list[int] | None = None  # new posted price per pool, when the policy posts one


class SimState:
    """Job columns plus the cluster; policies read it, only the engine's calls below write it."""

    def __init__(
        self, scenario: Scenario, jobs: Jobs, restart_overhead_s: int, holds: HoldRule | None = None
    ) -> None:
        n = len(jobs)
        self.scenario = scenario
        self.holds = holds or HoldRule()
        # The max hours each job declares (allocator/sim/holds.py): the rule's, or what the job needs if longer.
        self.declared_max_s: IntArray = np.maximum(
            int(self.holds.max_hours * 3600), jobs.duration_s + restart_overhead_s
        )
        self.hold_s: IntArray = np.zeros(n, dtype=np.int64)  # what the current lease's hold pays for
        self.stopped_at_hold: IntArray = np.zeros(n, dtype=np.bool_)
        self._sized: dict[tuple[int, int, int], int] = {}  # (tenant, gpus, work done) -> hold, this history
        self.jobs = jobs
        # Per-type speeds (docs/simulator.md §Per-type speeds): remaining_s counts work in seconds at speed 1,
        # a lease on pool p does it at speed[job, p]. None (no speed column): every path below is the
        # speed-1 arithmetic exactly.
        self.speed = jobs.speed
        speeds = jobs.speeds()
        self.slowest: npt.NDArray[np.float64] = np.array(
            [min((speeds[j, p] for p in prefs), default=1.0) for j, prefs in enumerate(jobs.prefs)]
        )
        if jobs.speed is not None:  # a job declares at least what it needs on its slowest acceptable type
            self.declared_max_s = np.maximum(
                self.declared_max_s, _ceil_div_many(jobs.duration_s, self.slowest) + restart_overhead_s
            )
        self.cluster = Cluster(scenario)
        self.restart_overhead_s = restart_overhead_s
        self.checkpoint_s = scenario.checkpoint_min * 60  # 0 = a preempted job keeps all its progress
        self.status = np.full(n, FUTURE, dtype=np.int8)
        self.remaining_s: IntArray = jobs.duration_s.copy()  # work left, excluding restart overhead
        self.overhead_s: IntArray = np.zeros(n, dtype=np.int64)  # restart overhead owed at next start
        self.seg_start: IntArray = np.zeros(n, dtype=np.int64)
        self.end_at: IntArray = np.zeros(n, dtype=np.int64)
        self.wait_since: IntArray = jobs.submit_s.copy()
        self.first_start: IntArray = np.full(n, -1, dtype=np.int64)
        self.finish: IntArray = np.full(n, -1, dtype=np.int64)
        self.preemptions: IntArray = np.zeros(n, dtype=np.int64)
        self.lease_pool: IntArray = np.full(n, -1, dtype=np.int64)
        self.lease_price: IntArray = np.zeros(n, dtype=np.int64)
        self.lease_tier: IntArray = np.full(n, TIER_NONE, dtype=np.int64)
        self.lease_charged: IntArray = np.zeros(n, dtype=np.int64)  # micro-credits charged so far this lease
        self.seg_overhead: IntArray = np.zeros(n, dtype=np.int64)  # restart overhead paid in this segment
        self.lease_gpus: dict[int, tuple[IntArray, IntArray]] = {}
        self.reject_reason: dict[int, str] = {}
        n_tenants = len(scenario.tenants)
        self.spent_micro: IntArray = np.zeros(n_tenants, dtype=np.int64)
        self.budget_micro: IntArray = np.array(
            [-1 if t.budget_micro is None else t.budget_micro for t in scenario.tenants], dtype=np.int64
        )
        self.reserve_by_pool: list[int] = [scenario.reserve_micro[t] for t in scenario.types]
        self.posted_micro: list[int] = list(self.reserve_by_pool)
        self.history = History()
        self.predictor = SimPredictor([t.name for t in scenario.tenants], n)
        self.running: set[int] = set()
        self.waiting: list[int] = []  # submit order; policies see the queue in this order

    # ---- reads ------------------------------------------------------------------------------------

    def limited(self, tenant: int) -> bool:
        return bool(self.budget_micro[tenant] >= 0)

    def run_need_s(self, job: int, pool: int | None = None) -> int:
        """Seconds a start would hold the GPUs for: the work left (at `pool`'s speed; without a pool, at the
        slowest acceptable one) plus any restart overhead owed."""
        return self.wall_s(job, int(self.remaining_s[job]), pool) + int(self.overhead_s[job])

    def pace(self, jobs: IntArray) -> npt.NDArray[np.float64]:
        """Each running job's speed on its lease's pool (ones without a speed column)."""
        if self.speed is None:
            return np.ones(len(jobs))
        return np.asarray(self.speed[jobs, self.lease_pool[jobs]], dtype=np.float64)

    def wall_s(self, job: int, work_s: int, pool: int | None = None) -> int:
        """Seconds `work_s` of the job's speed-1 work takes on `pool` (None: its slowest acceptable pool)."""
        if self.speed is None:
            return work_s
        speed = float(self.slowest[job]) if pool is None else float(self.speed[job, pool])
        return _ceil_div(work_s, speed)

    def hold_need_s(self, job: int, pool: int | None = None) -> int:
        """Seconds a start's hold would pay for, by the hold rule (allocator/sim/holds.py). Tenants without a
        budget, and the exact rule, hold for exactly what the job needs (on `pool`, or its slowest)."""
        tenant = int(self.jobs.tenant[job])
        if self.holds.rule == "exact" or not self.limited(tenant):
            return self.run_need_s(job, pool)
        declared = int(self.declared_max_s[job])
        if self.holds.rule == "max-hours":
            return declared
        done = int(self.jobs.duration_s[job] - self.remaining_s[job])
        key = (tenant, int(self.jobs.gpus[job]), done)
        if key not in self._sized:  # emptied whenever a job finishes (the history changed)
            got = self.predictor.history.predict(self.predictor.query(tenant, key[1]), float(done))
            self._sized[key] = sized_hold_s(None if got is None else got.remaining_p90_s, 0, 1 << 62)
        return min(self._sized[key] + int(self.overhead_s[job]), declared)

    def hold_need_s_many(self, jobs: IntArray) -> IntArray:
        """hold_need_s of each job, vectorised where the rule is exact or the tenant has no budget."""
        out: IntArray = self.remaining_s[jobs] + self.overhead_s[jobs]
        if self.speed is not None:  # the book does not know the pool yet: the slowest acceptable one
            out = _ceil_div_many(self.remaining_s[jobs], self.slowest[jobs]) + self.overhead_s[jobs]
        if self.holds.rule != "exact":
            for i, job in enumerate(jobs.tolist()):
                if self.limited(int(self.jobs.tenant[job])):
                    out[i] = self.hold_need_s(job)
        return out

    def cheapest_hold_micro(self, job: int) -> int:
        """The smallest hold a start could take: the run at the lowest reserve among acceptable types."""
        reserve = min(self.reserve_by_pool[p] for p in self.jobs.prefs[job])
        return _charge(reserve, self.jobs.gpus[job], self.hold_need_s(job))

    def hold_micro(self, job: int, price_micro: int) -> int:
        return _charge(price_micro, self.jobs.gpus[job], self.hold_need_s(job))

    def outstanding_hold_micro(self, tenant: int) -> int:
        """What the tenant's running leases will still cost: their holds, less what they already paid."""
        total = 0
        for job in self.running:
            if self.jobs.tenant[job] == tenant:
                full = _charge(self.lease_price[job], self.jobs.gpus[job], self.hold_s[job])
                total += full - int(self.lease_charged[job])
        return total

    def hold_end_at(self, job: int) -> int | None:
        """When the running job's hold runs out, if that is before it ends."""
        end = int(self.seg_start[job] + self.hold_s[job])
        return end if end < self.end_at[job] else None

    def available_micro(self, tenant: int) -> int | None:
        """Budget left after spending and after the holds of running leases; None when unlimited."""
        if not self.limited(tenant):
            return None
        return int(self.budget_micro[tenant] - self.spent_micro[tenant]) - self.outstanding_hold_micro(tenant)

    def last_checkpoint_at(self, job: int, now: int) -> int:
        """Trace time from which a preemption at `now` throws the running job's work away (the book's
        `Leases.checkpoint`, allocator.lost.lost_since): `now` when checkpointing is off (nothing would be
        lost); its last checkpoint; the end of the segment's restart overhead while nothing was checkpointed in
        it yet (time spent restarting is not progress: the restart is owed again in full, not counted lost)."""
        return int(self.last_checkpoint_at_many(np.array([job], dtype=np.int64), now)[0])

    def last_checkpoint_at_many(self, jobs: IntArray, now: int) -> IntArray:
        """last_checkpoint_at of each running job in `jobs`, vectorised (the market's leases, every round)."""
        if self.checkpoint_s == 0:
            return np.full(len(jobs), now, dtype=np.int64)
        start = self.seg_start[jobs]
        saved = self._saved_progress(jobs, now)
        saved_wall = saved if self.speed is None else _ceil_div_many(saved, self.pace(jobs))
        resumed = start + self.seg_overhead[jobs]
        return np.where(saved > 0, resumed + saved_wall, np.minimum(resumed, now)).astype(np.int64)

    def _saved_progress(self, jobs: IntArray, now: int) -> IntArray:
        """Seconds of this segment's progress that a preemption at `now` keeps: all of it when checkpointing
        is off, else up to the job's last checkpoint (every checkpoint_s of its own progress, counted over
        its whole run; a segment starts from a checkpoint, so the count restarts with it)."""
        wall = np.maximum(now - self.seg_start[jobs] - self.seg_overhead[jobs], 0)
        if self.speed is not None:  # seconds on the pool are pace x as much speed-1 work
            wall = np.floor(wall * self.pace(jobs) + 1e-9).astype(np.int64)
        progress = np.minimum(wall, self.remaining_s[jobs])
        if self.checkpoint_s == 0:
            return np.asarray(progress, dtype=np.int64)
        done_before = self.jobs.duration_s[jobs] - self.remaining_s[jobs]
        done_now = done_before + progress
        checkpoint = done_now // self.checkpoint_s * self.checkpoint_s
        return np.asarray(np.maximum(checkpoint, done_before) - done_before, dtype=np.int64)

    def held_by(self, tenant: int, pool: int) -> int:
        return sum(
            int(self.jobs.gpus[j])
            for j in self.running
            if self.jobs.tenant[j] == tenant and self.lease_pool[j] == pool
        )

    # ---- writes (the engine's) ---------------------------------------------------------------------

    def arrive(self, job: int, now: int, reject: str | None) -> None:
        if reject is not None:
            self.reject(job, reject)
            return
        self.status[job] = WAITING
        self.predictor.at_submit(job, int(self.jobs.tenant[job]), int(self.jobs.gpus[job]))
        self.wait_since[job] = self.jobs.submit_s[job]
        self.waiting.append(job)

    def reject(self, job: int, reason: str, now: int | None = None) -> None:
        if self.status[job] == WAITING:
            assert now is not None
            self._record_wait(job, now)
        self.status[job] = REJECTED
        self.reject_reason[job] = reason

    def start(self, s: Start, now: int) -> None:
        job = s.job
        if self.status[job] != WAITING:
            raise RuntimeError(f"job {self.jobs.ids[job]} started while not waiting")
        self.cluster.take_slots(job, s.nodes, s.slots)
        self._record_wait(job, now)
        self.status[job] = RUNNING
        self.running.add(job)
        self.seg_start[job] = now
        self.end_at[job] = now + self.run_need_s(job, s.pool)
        self.hold_s[job] = self.hold_need_s(job, s.pool)
        self.seg_overhead[job] = self.overhead_s[job]
        self.overhead_s[job] = 0
        if self.first_start[job] < 0:
            self.first_start[job] = now
        self.lease_pool[job] = s.pool
        self.lease_price[job] = s.price_micro
        self.lease_tier[job] = s.tier
        self.lease_charged[job] = 0
        self.lease_gpus[job] = (s.nodes, s.slots)

    def preempt(self, job: int, now: int) -> None:
        """The job goes back to the queue and owes a restart overhead. Without periodic checkpoints
        (checkpoint_min off) it checkpointed in its grace period and keeps its progress; with them it keeps
        the progress up to its last checkpoint and must redo the rest (recorded as lost GPU-seconds)."""
        saved = int(self._saved_progress(np.array([job], dtype=np.int64), now)[0])
        # GPU time thrown away: allocator.lost's figure, from the same point the market policy's book ranked
        # this victim on (last_checkpoint_at); an interrupted restart is owed again in full, not counted lost.
        gpus = int(self.jobs.gpus[job])
        self._end_lease(job, now, PREEMPTED, lost.lost_gpu_s(gpus, self.last_checkpoint_at(job, now), now))
        self.remaining_s[job] = max(0, int(self.remaining_s[job]) - saved)
        self.overhead_s[job] = self.restart_overhead_s
        self.preemptions[job] += 1
        self.status[job] = WAITING
        self.wait_since[job] = now
        self.waiting.append(job)
        self.waiting.sort()  # back in its submit-order place, as the platform keeps its submit time

    def complete(self, job: int) -> None:
        end = int(self.end_at[job])
        self._end_lease(job, end, COMPLETED)
        self.remaining_s[job] = 0
        self.status[job] = DONE
        self.finish[job] = end
        jobs = self.jobs
        runtime = self.wall_s(job, int(jobs.duration_s[job]), int(self.lease_pool[job]))
        self.predictor.finished(int(jobs.tenant[job]), int(jobs.gpus[job]), runtime, end)
        self._sized.clear()

    def hold_ran_out(self, job: int, at: int) -> bool:
        """The job's hold runs out at `at` while it still runs: extend it from the balance by as long again
        (never past its max hours), or stop it there. True when extended."""
        more = min(int(self.hold_s[job]), int(self.declared_max_s[job]) - int(self.hold_s[job]))
        self._charge_to(job, at)
        available = self.available_micro(int(self.jobs.tenant[job]))
        cost = _charge(self.lease_price[job], self.jobs.gpus[job], more)
        if more > 0 and (available is None or available >= cost):
            self.hold_s[job] += more
            return True
        pace = float(self.pace(np.array([job], dtype=np.int64))[0])
        self._end_lease(job, at, HOLD_RAN_OUT)
        left = max(0, int(self.end_at[job]) - at)
        self.remaining_s[job] = left if self.speed is None else int(left * pace)
        self.status[job] = REJECTED
        self.reject_reason[job] = STOPPED_AT_HOLD
        self.stopped_at_hold[job] = True
        return False

    def charge_running(self, now: int) -> None:
        """Charge every running lease up to `now` at its price; holds make the total exact per lease."""
        for job in self.running:
            self._charge_to(job, min(now, int(self.end_at[job])))

    def retier(self, job: int, tier: int) -> None:
        """The allocator moved a running lease to another tier (§Clearing step 2: back under a guarantee)."""
        self.lease_tier[job] = tier

    def set_posted(self, prices: list[int], now: int) -> None:
        if prices != self.posted_micro or not self.history.price_time:
            self.posted_micro = list(prices)
            self.history.price_time.append(now)
            self.history.price_micro.append(list(prices))

    # ---- internals ---------------------------------------------------------------------------------

    def _record_wait(self, job: int, now: int) -> None:
        """Close the job's current waiting interval (it starts or is given up on at `now`)."""
        self.waiting.remove(job)
        h = self.history
        h.wait_job.append(job)
        h.wait_start.append(int(self.wait_since[job]))
        h.wait_end.append(now)

    def _charge_to(self, job: int, until: int) -> None:
        total = _charge(self.lease_price[job], self.jobs.gpus[job], until - self.seg_start[job])
        tenant = self.jobs.tenant[job]
        self.spent_micro[tenant] += total - self.lease_charged[job]
        self.lease_charged[job] = total

    def _end_lease(self, job: int, end: int, ended: str, lost_gpu_s: int = 0) -> None:
        self._charge_to(job, end)
        nodes, slots = self.lease_gpus.pop(job)
        self.cluster.release(nodes, slots)
        self.running.discard(job)
        h = self.history
        h.run_job.append(job)
        h.run_pool.append(int(self.lease_pool[job]))
        h.run_start.append(int(self.seg_start[job]))
        h.run_end.append(end)
        h.run_tier.append(int(self.lease_tier[job]))
        h.run_ended.append(ended)
        h.run_lost_gpu_s.append(lost_gpu_s)


def _ceil_div(work_s: int, speed: float) -> int:
    """Whole seconds to do `work_s` at `speed`, rounded up (a hair of float error does not add a second)."""
    return int(np.ceil(work_s / speed - 1e-9))


def _ceil_div_many(work_s: IntArray, speed: npt.NDArray[np.float64]) -> IntArray:
    return np.ceil(work_s / speed - 1e-9).astype(np.int64)


def _charge(price_micro: int | np.integer, gpus: int | np.integer, seconds: int | np.integer) -> int:
    """Micro-credits for `gpus` GPUs held `seconds` at a price per GPU-hour, rounded down."""
    return int(price_micro) * int(gpus) * max(0, int(seconds)) // 3600
