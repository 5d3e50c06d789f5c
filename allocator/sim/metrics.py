"""The figures the summary reports, each computed from a finished simulation's history (docs/simulator.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from allocator import fairshare
from allocator.fairshare import jain_excess
from allocator.sim.lost import lost_figures, lost_gpu_hours_by_tenant, placement_figures
from allocator.sim.predictions import prediction_figures
from allocator.sim.scenario import MICRO
from allocator.sim.series import FloatArray, IntArray, Steps
from allocator.sim.state import DONE, REJECTED, SimState

Summary = dict[str, Any]


@dataclass(frozen=True)
class Trace:
    """The history as arrays: run segments and waiting intervals, with the grid of round ticks."""

    run_job: IntArray
    run_pool: IntArray
    run_start: IntArray
    run_end: IntArray
    wait_job: IntArray
    wait_start: IntArray
    wait_end: IntArray
    ticks: IntArray  # every round tick from the first submit to the end, skipped or not
    first_submit: int
    last_submit: int


def trace_of(state: SimState) -> Trace:
    h = state.history
    jobs = state.jobs
    round_s = state.scenario.round_s
    first = int(jobs.submit_s[0]) if len(jobs) else 0
    last = int(jobs.submit_s[-1]) if len(jobs) else 0
    end = max([last, *h.run_end, *h.wait_end])
    t0 = -(-first // round_s) * round_s
    return Trace(
        run_job=np.array(h.run_job, dtype=np.int64),
        run_pool=np.array(h.run_pool, dtype=np.int64),
        run_start=np.array(h.run_start, dtype=np.int64),
        run_end=np.array(h.run_end, dtype=np.int64),
        wait_job=np.array(h.wait_job, dtype=np.int64),
        wait_start=np.array(h.wait_start, dtype=np.int64),
        wait_end=np.array(h.wait_end, dtype=np.int64),
        ticks=np.arange(t0, max(end, t0 + 1), round_s, dtype=np.int64),
        first_submit=first,
        last_submit=last,
    )


def _stats(prefix: str, values: FloatArray) -> dict[str, float | None]:
    if len(values) == 0:
        return {f"avg_{prefix}_s": None, f"p50_{prefix}_s": None, f"p95_{prefix}_s": None}
    return {
        f"avg_{prefix}_s": round(float(values.mean()), 1),
        f"p50_{prefix}_s": round(float(np.percentile(values, 50)), 1),
        f"p95_{prefix}_s": round(float(np.percentile(values, 95)), 1),
    }


def _job_figures(state: SimState, mask: npt.NDArray[np.bool_]) -> dict[str, Any]:
    jobs = state.jobs
    done = mask & (state.status == DONE)
    started = mask & (state.first_start >= 0)
    jct = (state.finish[done] - jobs.submit_s[done]).astype(np.float64)
    queue = (state.first_start[started] - jobs.submit_s[started]).astype(np.float64)
    return {
        "jobs": int(mask.sum()),
        "completed": int(done.sum()),
        "rejected": int((mask & (state.status == REJECTED)).sum()),
        **_stats("jct", jct),
        **_stats("queue", queue),
        "preemptions": int(state.preemptions[mask].sum()),
    }


def _window_gpu_s(trace: Trace, seg: npt.NDArray[np.bool_], gpus: IntArray) -> float:
    """GPU-seconds of the chosen segments that fall between the first and the last submit."""
    lo = np.maximum(trace.run_start[seg], trace.first_submit)
    hi = np.minimum(trace.run_end[seg], trace.last_submit)
    return float((np.maximum(hi - lo, 0) * gpus[seg]).sum())


class Figures:
    """Holds the sampled series that several figures share, so each is computed once."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self.trace = trace_of(state)
        jobs, tr = state.jobs, self.trace
        self.capacity = int(state.cluster.pool_gpus.sum())
        self.seg_gpus = jobs.gpus[tr.run_job]
        self.seg_tenant = jobs.tenant[tr.run_job]
        n_tenants, n_pools = len(state.scenario.tenants), len(state.scenario.pools)
        self.guarantee = np.array(
            [[t.guaranteed.get(p.gpu_type, 0) for p in state.scenario.pools] for t in state.scenario.tenants],
            dtype=np.int64,
        ).reshape(n_tenants, n_pools)
        self.weight = np.array([t.weight for t in state.scenario.tenants])
        self.held = self._held_at_ticks(n_tenants, n_pools)  # [tick, tenant, pool]
        self.waiting_jobs = self._waiting_at_ticks(n_tenants)  # [tick, tenant]

    def _held_at_ticks(self, n_tenants: int, n_pools: int) -> FloatArray:
        tr = self.trace
        held = np.zeros((len(tr.ticks), n_tenants, n_pools))
        for tenant in range(n_tenants):
            for pool in range(n_pools):
                seg = (self.seg_tenant == tenant) & (tr.run_pool == pool)
                if seg.any():
                    steps = Steps(tr.run_start[seg], tr.run_end[seg], self.seg_gpus[seg])
                    held[:, tenant, pool] = steps.at(tr.ticks)
        return held

    def _waiting_at_ticks(self, n_tenants: int) -> FloatArray:
        tr = self.trace
        wait_tenant = self.state.jobs.tenant[tr.wait_job]
        out = np.zeros((len(tr.ticks), n_tenants))
        for tenant in range(n_tenants):
            sel = wait_tenant == tenant
            if sel.any():
                out[:, tenant] = Steps(tr.wait_start[sel], tr.wait_end[sel], 1.0).at(tr.ticks)
        return out

    def utilization(self) -> float | None:
        tr = self.trace
        span = tr.last_submit - tr.first_submit
        if span <= 0:
            return None
        every = np.ones(len(tr.run_job), dtype=np.bool_)
        return round(_window_gpu_s(tr, every, self.seg_gpus) / (self.capacity * span), 4)

    def busy_utilization(self) -> float | None:
        """Allocated over capacity GPU-time, over the rounds that ended their tick with a job still waiting."""
        tr = self.trace
        busy = self.waiting_jobs.sum(axis=1) > 0
        if not busy.any():
            return None
        round_s = self.state.scenario.round_s
        edges = np.append(tr.ticks, tr.ticks[-1] + round_s)
        per_round = Steps(tr.run_start, tr.run_end, self.seg_gpus).integral(edges)
        return round(float(per_round[busy].sum() / (self.capacity * round_s * busy.sum())), 4)

    def violations(self) -> npt.NDArray[np.bool_]:
        """[tick, tenant]: some waiting job of the tenant would have fit in its unused guarantee of a type."""
        tr, jobs = self.trace, self.state.jobs
        round_s = self.state.scenario.round_s
        n_ticks = len(tr.ticks)
        smallest = np.full(self.held.shape, np.inf)  # smallest waiting gang per tick, tenant, pool
        first = -(-(tr.wait_start - tr.ticks[0]) // round_s)
        stop = -(-(tr.wait_end - tr.ticks[0]) // round_s)
        for i, job in enumerate(tr.wait_job):
            lo, hi = max(int(first[i]), 0), min(int(stop[i]), n_ticks)
            if lo >= hi:
                continue
            tenant, gpus = int(jobs.tenant[job]), float(jobs.gpus[job])
            for pool in jobs.prefs[job]:
                if self.guarantee[tenant, pool] >= gpus:
                    view = smallest[lo:hi, tenant, pool]
                    np.minimum(view, gpus, out=view)
        unused = self.guarantee[None, :, :] - self.held
        return np.asarray((smallest <= unused).any(axis=2), dtype=np.bool_)

    def jain_excess(self) -> float | None:
        """Diagnostic: mean Jain index of excess/weight over tenants with waiting jobs (``fairshare``)."""
        return jain_excess(self.held, self.guarantee, self.weight, self.waiting_jobs)

    def fair_share(self) -> fairshare.Series:
        """The definition's inputs at every tick (allocator/fairshare.py): held, waiting GPUs in each waiting
        job's best type (its first acceptable pool; a job the simulator rejected never waits) and the smallest
        waiting gang, by [tick, tenant, pool]."""
        tr, jobs = self.trace, self.state.jobs
        round_s = self.state.scenario.round_s
        n_ticks = len(tr.ticks)
        waiting = np.zeros(self.held.shape)
        smallest = np.full(self.held.shape, np.inf)
        first = -(-(tr.wait_start - tr.ticks[0]) // round_s)
        stop = -(-(tr.wait_end - tr.ticks[0]) // round_s)
        for i, job in enumerate(tr.wait_job.tolist()):
            lo, hi = max(int(first[i]), 0), min(int(stop[i]), n_ticks)
            if lo >= hi or not jobs.prefs[job]:
                continue
            tenant, pool, gpus = int(jobs.tenant[job]), int(jobs.prefs[job][0]), float(jobs.gpus[job])
            waiting[lo:hi, tenant, pool] += gpus
            view = smallest[lo:hi, tenant, pool]
            np.minimum(view, gpus, out=view)
        capacity = self.state.cluster.pool_gpus.astype(np.float64)
        return fairshare.Series.of(
            tr.ticks, self.held, waiting, smallest, self.guarantee, self.weight, capacity
        )


def _compliance(
    violated: npt.NDArray[np.bool_], relevant: npt.NDArray[np.bool_] | None = None
) -> float | None:
    if relevant is None:
        return round(1.0 - float(violated.mean()), 4) if violated.size else None
    if not relevant.any():
        return None
    return round(1.0 - float(violated[relevant].mean()), 4)


DAY_S, HOUR_S = 86400, 3600


def _fair_share_figures(series: fairshare.Series) -> dict[str, Any]:
    """The fair-share figures of allocator/fairshare.py: compliance over 24 h and 1 h windows, per round
    (gang-aware), and the shortfall."""
    return {
        "fair_share_compliance_24h": fairshare.window_compliance(series, DAY_S),
        "fair_share_compliance_1h": fairshare.window_compliance(series, HOUR_S),
        "fair_share_round_compliance": fairshare.round_compliance(series),
        "fair_share_shortfall": fairshare.shortfall(series),
    }


def _per_tenant(fig: Figures, violated: npt.NDArray[np.bool_], series: fairshare.Series) -> dict[str, Any]:
    state, tr = fig.state, fig.trace
    span = max(tr.last_submit - tr.first_submit, 1)
    out: dict[str, Any] = {}
    day = fairshare.window_compliance_by_tenant(series, DAY_S)
    per_round = fairshare.round_compliance_by_tenant(series)
    short = fairshare.shortfall_by_tenant(series)
    lost = lost_gpu_hours_by_tenant(state)
    for index, tenant in enumerate(state.scenario.tenants):
        seg = fig.seg_tenant == index
        budget = state.budget_micro[index]
        out[tenant.name] = {
            **_job_figures(state, state.jobs.tenant == index),
            "stopped_at_hold": int(state.stopped_at_hold[state.jobs.tenant == index].sum()),
            "gpu_hours": round(float(((tr.run_end - tr.run_start) * fig.seg_gpus)[seg].sum()) / 3600, 1),
            "share": round(_window_gpu_s(tr, seg, fig.seg_gpus) / (fig.capacity * span), 4),
            "guarantee_gpus": {
                p.gpu_type: int(fig.guarantee[index, k]) for k, p in enumerate(state.scenario.pools)
            },
            "weight": tenant.weight,
            "guarantee_compliance": _compliance(violated[:, index]),
            "fair_share_compliance_24h": day[index],
            "fair_share_round_compliance": per_round[index],
            "fair_share_shortfall": short[index],
            "spend": round(int(state.spent_micro[index]) / MICRO, 2),
            "budget": None if budget < 0 else round(int(budget) / MICRO, 2),
            "lost_gpu_hours": lost[index],
        }
    return out


def summarize(state: SimState, policy: str, sim_wall_s: float) -> Summary:
    """One policy's summary object, as written to stdout and summary.json."""
    fig = Figures(state)
    tr = fig.trace
    violated = fig.violations()
    series = fig.fair_share()
    every = np.ones(len(state.jobs), dtype=np.bool_)
    finish = state.finish[state.finish >= 0]
    reasons: dict[str, int] = {}
    for reason in state.reject_reason.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    return {
        "scenario": state.scenario.name,
        "policy": policy,
        **_job_figures(state, every),
        "rejected_reasons": dict(sorted(reasons.items())),
        "utilization": fig.utilization(),
        "busy_utilization": fig.busy_utilization(),
        "guarantee_compliance": _compliance(violated),
        "guarantee_compliance_waiting": _compliance(violated, fig.waiting_jobs > 0),
        **_fair_share_figures(series),
        "jain_excess": fig.jain_excess(),  # a diagnostic only (fairshare.jain_excess)
        "makespan_s": int(finish.max() - tr.first_submit) if len(finish) else None,
        "rounds": len(tr.ticks),
        "cleared_rounds": state.history.cleared_rounds,
        "capacity_gpus": fig.capacity,
        "restart_overhead_s": state.restart_overhead_s,
        "spend": round(int(state.spent_micro.sum()) / MICRO, 2),
        **prediction_figures(state.predictor, state.jobs.duration_s),
        "holds": state.holds.rule,
        "stopped_at_hold": int(state.stopped_at_hold.sum()),
        **lost_figures(state),
        **placement_figures(state),
        "sim_wall_s": round(sim_wall_s, 3),
        "per_tenant": _per_tenant(fig, violated, series),
    }
