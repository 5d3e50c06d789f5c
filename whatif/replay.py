"""Replays one workload under today's policy and under a proposal, through the simulator's market policy
(the platform's own clearing), and draws the simulator's plots of both. No Django here.

Each side's trace is written in the scenario format and read back with the simulator's own reader, so a
replay runs on exactly what `export_trace` would have written."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.sim.engine import simulate
from allocator.sim.jobs import read_jobs
from allocator.sim.metrics import summarize
from allocator.sim.policies.market import Market, MarketOptions
from allocator.sim.scenario import read_scenario
from allocator.sim.state import SimState
from whatif.trace import Trace, write_trace

SIDES = ("today", "proposal")
Progress = Callable[[float], None]  # share of the work done, 0 to 1


@dataclass(frozen=True)
class Side:
    trace: Trace
    options: MarketOptions


@dataclass(frozen=True)
class Replay:
    summaries: dict[str, dict[str, Any]]  # side -> allocator.sim.metrics.summarize(...)
    plots: dict[str, bytes]  # plot name -> PNG


def _run(
    side: str, spec: Side, workdir: Path, progress: Callable[[int], None]
) -> tuple[SimState, dict[str, Any]]:
    scenario = read_scenario(write_trace(spec.trace, workdir / side / "scenario.toml"))
    jobs = read_jobs(scenario)
    state = simulate(scenario, jobs, lambda s: Market(s, spec.options), progress=progress)
    return state, summarize(state, side, 0.0)


def replay(today: Side, proposal: Side, progress: Progress | None = None, *, plots: bool = True) -> Replay:
    """Both sides, one after the other; `progress` gets the share of settled jobs over both runs."""
    total = max(len(today.trace.jobs) + len(proposal.trace.jobs), 1)
    states: dict[str, SimState] = {}
    summaries: dict[str, dict[str, Any]] = {}
    done = 0
    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        workdir = Path(tmp)
        for side, spec in zip(SIDES, (today, proposal), strict=True):
            offset = done

            def tick(settled: int, offset: int = offset) -> None:
                if progress is not None:
                    progress(min((offset + settled) / total, 1.0))

            states[side], summaries[side] = _run(side, spec, workdir, tick)
            done += len(spec.trace.jobs)
            tick(len(spec.trace.jobs), offset)
        drawn: dict[str, bytes] = {}
        if plots:
            from allocator.sim.plots import write_plots  # matplotlib is slow to import: only when drawing

            for path in write_plots(workdir / "plots", states):
                drawn[path.stem] = path.read_bytes()
    return Replay(summaries, drawn)
