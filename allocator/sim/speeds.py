"""How wrong the platform's speed estimates are on a trace whose per-type speeds are known
(docs/simulator.md §Per-type speeds; the estimator is allocator/speed.py, the one the platform uses).

Which runs the estimator learns from comes from one of two places: `uniform_runs` (every job starts at its
submit on one of its acceptable types, drawn uniformly with a seeded generator, and runs duration_s / speed
there: the estimator alone, without queueing) or `simulated_runs` (what a policy replay through the engine
actually ran, where the market chose the types). At each submit, in time order, the job asks the estimator
for every type's speed against the reference type, from the runs that had finished by then (no look-ahead),
exactly as the submit form does; the answer is compared with the job's known ratio speed_t / speed_reference. Traces carry no job
names or commands, so matches are by team and GPU count, then by GPU count across teams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from allocator.predict import Finished, Query
from allocator.sim.jobs import Jobs
from allocator.sim.scenario import Scenario
from allocator.sim.state import DONE, SimState
from allocator.speed import SpeedHistory


@dataclass(frozen=True)
class SpeedReplay:
    """Per job and type: the estimated factor (NaN at cold start), the known one, and whether the known one
    fell inside the estimate's 90% interval."""

    types: list[str]
    reference: str
    estimate: npt.NDArray[np.float64]
    truth: npt.NDArray[np.float64]
    covered: npt.NDArray[np.bool_]
    confidence: npt.NDArray[np.str_]  # the estimate's label: high, medium, low; "" at cold start
    placed: npt.NDArray[np.int64]  # the type index each learned-from job ran on; -1 for the others


@dataclass(frozen=True)
class Run:
    """A finished single-type run the estimator learns from at `end` (trace seconds)."""

    job: int
    pool: int
    runtime_s: float
    end: float


def uniform_runs(jobs: Jobs, seed: int = 0) -> list[Run]:
    """Every job starts at its submit on one of its acceptable types, drawn uniformly: no queueing."""
    rng = np.random.default_rng(seed)
    speed = jobs.speeds()
    out = []
    for job, prefs in enumerate(jobs.prefs):
        pool = prefs[int(rng.integers(len(prefs)))]
        runtime = float(jobs.duration_s[job]) / float(speed[job, pool])
        out.append(Run(job, pool, runtime, float(jobs.submit_s[job]) + runtime))
    return out


def simulated_runs(state: SimState) -> list[Run]:
    """What a policy replay (allocator.sim.engine) ran: each completed job whose every segment ran on one pool
    (a job moved between types is a blend of speeds, and the platform leaves it out too), with what it took
    there and when it finished."""
    pools: dict[int, set[int]] = {}
    for job, pool in zip(state.history.run_job, state.history.run_pool, strict=True):
        pools.setdefault(job, set()).add(pool)
    out = []
    for job, seen in pools.items():
        if state.status[job] == DONE and len(seen) == 1:
            pool = next(iter(seen))
            runtime = float(state.wall_s(job, int(state.jobs.duration_s[job]), pool))
            out.append(Run(job, pool, runtime, float(state.finish[job])))
    return out


def replay_speeds(scenario: Scenario, jobs: Jobs, reference: str, runs: list[Run]) -> SpeedReplay:
    """Every job's speed estimates at its submit, from the `runs` finished by then, against the known speeds
    of the trace."""
    types = list(scenario.types)
    ref = types.index(reference)
    speed = jobs.speeds()
    names = [t.name for t in scenario.tenants]
    shape = (len(jobs), len(types))
    estimate, covered = np.full(shape, np.nan), np.zeros(shape, dtype=np.bool_)
    confidence = np.full(shape, "", dtype="<U9")
    placed = np.full(len(jobs), -1, dtype=np.int64)
    history = SpeedHistory()
    pending = sorted(runs, key=lambda r: (r.end, r.job))
    learned = 0
    for job in range(len(jobs)):
        now = float(jobs.submit_s[job])
        while learned < len(pending) and pending[learned].end <= now:
            history.add(_finished(jobs, names, types, pending[learned]))
            learned += 1
        query = Query(names[int(jobs.tenant[job])], "", "", int(jobs.gpus[job]))
        found = history.speeds(query, types, reference).factors  # what the submit form asks
        for k, name in enumerate(types):
            got = found[name]
            if got.factor is not None:
                estimate[job, k], confidence[job, k] = got.factor, got.confidence
                low, high = got.interval or (got.factor, got.factor)
                covered[job, k] = low <= speed[job, k] / speed[job, ref] <= high
    for run in runs:
        placed[run.job] = run.pool
    truth = speed / speed[:, [ref]]
    return SpeedReplay(types, reference, estimate, truth, covered, confidence, placed)


def _finished(jobs: Jobs, names: list[str], types: list[str], run: Run) -> Finished:
    tenant, gpus = names[int(jobs.tenant[run.job])], int(jobs.gpus[run.job])
    return Finished(tenant, "", "", gpus, run.runtime_s, run.end, types[run.pool])


def speed_figures(replay: SpeedReplay) -> dict[str, Any]:
    """Per type other than the reference: jobs asked, the cold-start share, the median and 90th percentile
    of the absolute relative error |estimate - known| / known, and how often the 90% interval held the
    known speed; and the same errors by the estimate's confidence label (is "high" better than "low"?)."""
    out: dict[str, Any] = {}
    for k, name in enumerate(replay.types):
        if name == replay.reference:
            continue
        known = ~np.isnan(replay.estimate[:, k])
        error = np.abs(replay.estimate[known, k] - replay.truth[known, k]) / replay.truth[known, k]
        asked = len(replay.estimate)
        out[name] = {
            "jobs": asked,
            "cold_start_share": round(1 - float(known.sum()) / max(asked, 1), 4),
            "median_abs_rel_error": round(float(np.median(error)), 4) if known.any() else None,
            "p90_abs_rel_error": round(float(np.quantile(error, 0.9)), 4) if known.any() else None,
            "interval_coverage": round(float(replay.covered[known, k].mean()), 4) if known.any() else None,
            "by_confidence": _by_confidence(replay, k),
        }
    return out


def _by_confidence(replay: SpeedReplay, k: int) -> dict[str, dict[str, float]]:
    out = {}
    for label in ("high", "medium", "low"):
        rows = replay.confidence[:, k] == label
        if rows.any():
            error = np.abs(replay.estimate[rows, k] - replay.truth[rows, k]) / replay.truth[rows, k]
            out[label] = {
                "share": round(float(rows.mean()), 4),
                "median_abs_rel_error": round(float(np.median(error)), 4),
            }
    return out
