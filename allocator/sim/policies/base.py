"""What every policy shares: the interface the engine calls and the submit-time rejection rules."""

from __future__ import annotations

from abc import ABC, abstractmethod

from allocator.sim.state import Decision, SimState


class Policy(ABC):
    name: str = ""
    # True when a round's decision depends only on the queue and the free GPUs, so the engine may skip
    # rounds in which neither changed; a market that moves prices every round must be asked each round.
    stable: bool = True
    # True when the policy looks at bids; then bids below every acceptable reserve can never win.
    priced: bool = False

    def __init__(self, state: SimState) -> None:
        self.state = state

    @abstractmethod
    def decide(self, now: int) -> Decision:
        """One round: which waiting jobs start where, which running ones are preempted."""

    def admit(self, job: int) -> str | None:
        """Why the job can never run under this policy, or None; checked once, at submit."""
        state = self.state
        jobs = state.jobs
        prefs = jobs.prefs[job]
        if not prefs:
            return f"no pool of an acceptable GPU type ({'|'.join(jobs.unknown_types[job])})"
        gpus = int(jobs.gpus[job])
        if gpus > max(int(state.cluster.pool_gpus[p]) for p in prefs):
            return "needs more GPUs than any acceptable pool holds"
        if self.priced:
            reserve = state.reserve_by_pool
            if all(jobs.price_micro[job, p] < reserve[p] for p in prefs):
                return "limit price below the reserve of every acceptable type"
        return None
