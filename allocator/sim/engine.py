"""The discrete-event loop: round ticks every round_s, job completions between them, idle stretches skipped."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from allocator.sim.holds import HoldRule
from allocator.sim.jobs import Jobs
from allocator.sim.policies.base import Policy
from allocator.sim.scenario import Scenario
from allocator.sim.state import RUNNING, WAITING, Decision, SimState

# Rounds a policy may place nothing while the cluster is otherwise idle and no job is still to arrive,
# before its waiting jobs are declared impossible (a market's price must get time to fall to the reserve).
STALL_ROUNDS = 48

Progress = Callable[[int], None]  # called with the number of jobs settled (done or rejected) so far


class Engine:
    def __init__(self, state: SimState, policy: Policy, progress: Progress | None = None) -> None:
        self.state = state
        self.policy = policy
        self.progress = progress
        self.round_s = state.scenario.round_s
        self.completions: list[tuple[int, int]] = []  # (end time, job); stale after a preemption
        self.hold_ends: list[tuple[int, int]] = []  # (time a hold runs out, job); stale once the job stopped
        self.next_arrival = 0
        self.stalled = 0

    def tick_at_or_after(self, t: int) -> int:
        return -(-t // self.round_s) * self.round_s

    def run(self) -> SimState:
        jobs = self.state.jobs
        if len(jobs) == 0:
            return self.state
        now = self.tick_at_or_after(int(jobs.submit_s[0]))
        while True:
            self._advance_to(now)
            if not self.state.waiting:
                upcoming = self._next_event()
                if upcoming is None:
                    return self.state
                now = self.tick_at_or_after(upcoming)
                continue
            moved = self._round(now)
            now = self._next_round(now, moved)

    def _round(self, now: int) -> bool:
        """Ask the policy once and apply its decision; True when anything started or stopped."""
        decision = self.policy.decide(now)
        self._apply(decision, now)
        self.state.history.cleared_rounds += 1
        moved = bool(decision.starts or decision.preempt or decision.reject)
        self._watch_stall(now, moved)
        return moved

    def _next_round(self, now: int, moved: bool) -> int:
        """A stable policy that placed nothing will place nothing until a job arrives or ends."""
        if self.policy.stable and not moved and self.state.waiting:
            upcoming = self._next_event()
            if upcoming is not None:
                return max(now + self.round_s, self.tick_at_or_after(upcoming))
        return now + self.round_s

    def _advance_to(self, now: int) -> None:
        state = self.state
        settled_before = self._settled()
        jobs = state.jobs
        # Completions, holds running out and arrivals, in time order (a job finishing at the second another
        # is submitted comes first): the predictor sees only jobs that finished by a job's submit time.
        while True:
            end = self.completions[0][0] if self.completions else now + 1
            hold = self.hold_ends[0][0] if self.hold_ends else now + 1
            arrival = int(jobs.submit_s[self.next_arrival]) if self.next_arrival < len(jobs) else now + 1
            if min(end, hold, arrival) > now:
                break
            if arrival < min(end, hold):
                job = self.next_arrival
                state.arrive(job, now, self.policy.admit(job))
                self.next_arrival += 1
            elif hold < end:
                self._hold_end(*heapq.heappop(self.hold_ends))
            else:
                end, job = heapq.heappop(self.completions)
                if state.status[job] == RUNNING and state.end_at[job] == end:
                    state.complete(job)
        state.charge_running(now)
        self._reject_unaffordable(now)
        if self.progress is not None and self._settled() != settled_before:
            self.progress(self._settled())

    def _apply(self, decision: Decision, now: int) -> None:
        state = self.state
        for job, reason in decision.reject:
            state.reject(job, reason, now)
        for job in decision.preempt:
            state.preempt(job, now)
        for start in decision.starts:
            state.start(start, now)
            heapq.heappush(self.completions, (int(state.end_at[start.job]), start.job))
            self._watch_hold(start.job)
        if decision.posted_micro is not None:
            state.set_posted(decision.posted_micro, now)

    def _watch_hold(self, job: int) -> None:
        at = self.state.hold_end_at(job)
        if at is not None:
            heapq.heappush(self.hold_ends, (at, job))

    def _hold_end(self, at: int, job: int) -> None:
        state = self.state
        if state.status[job] != RUNNING or state.hold_end_at(job) != at:
            return  # the job ended, was preempted, or its hold was extended since
        if state.hold_ran_out(job, at):
            self._watch_hold(job)

    def _next_event(self) -> int | None:
        while self.completions:
            end, job = self.completions[0]
            if self.state.status[job] == RUNNING and self.state.end_at[job] == end:
                break
            heapq.heappop(self.completions)
        candidates = [self.completions[0][0]] if self.completions else []
        if self.next_arrival < len(self.state.jobs):
            candidates.append(int(self.state.jobs.submit_s[self.next_arrival]))
        return min(candidates) if candidates else None

    def _reject_unaffordable(self, now: int) -> None:
        """A tenant's balance never grows, so a job it cannot pay for even at the reserve never runs."""
        state = self.state
        if not (state.budget_micro >= 0).any():
            return  # nobody has a budget: nothing to check (the Philly traces)
        available: dict[int, int | None] = {}
        for job in list(state.waiting):
            tenant = int(state.jobs.tenant[job])
            if not state.limited(tenant):
                continue
            if tenant not in available:
                available[tenant] = state.available_micro(tenant)
            balance = available[tenant]
            if balance is not None and balance < state.cheapest_hold_micro(job):
                state.reject(job, "budget exhausted", now)

    def _watch_stall(self, now: int, moved: bool) -> None:
        state = self.state
        idle = not state.running and self.next_arrival >= len(state.jobs)
        self.stalled = self.stalled + 1 if idle and not moved else 0
        if self.stalled >= (1 if self.policy.stable else STALL_ROUNDS):
            for job in list(state.waiting):
                state.reject(
                    job, "never placed: the policy left it waiting on an otherwise idle cluster", now
                )
            self.stalled = 0

    def _settled(self) -> int:
        return int(((self.state.status != WAITING) & (self.state.status != RUNNING)).sum()) - (
            len(self.state.jobs) - self.next_arrival
        )


def simulate(
    scenario: Scenario,
    jobs: Jobs,
    policy_factory: Callable[[SimState], Policy],
    restart_overhead_s: int = 60,
    progress: Progress | None = None,
    holds: HoldRule | None = None,
) -> SimState:
    """Replay `jobs` through one policy; the returned state's history holds everything that happened."""
    state = SimState(scenario, jobs, restart_overhead_s, holds)
    return Engine(state, policy_factory(state), progress).run()
