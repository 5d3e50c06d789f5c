"""Writing the results: summary.json, runs.csv and waits.csv, and the comparison table printed after the JSON
lines."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from allocator.sim.state import SimState

RUNS_COLUMNS = ("policy", "job", "tenant", "gpu_type", "gpus", "start", "end", "ended", "lost_gpu_s")
WAITS_COLUMNS = ("policy", "job", "tenant", "gpus", "from", "until")

COLUMNS = (
    ("policy", "policy", "{}"),
    ("done", "completed", "{}"),
    ("rej", "rejected", "{}"),
    ("avg JCT h", "avg_jct_s", "h"),
    ("p95 JCT h", "p95_jct_s", "h"),
    ("avg queue h", "avg_queue_s", "h"),
    ("p50 queue s", "p50_queue_s", "{:.0f}"),
    ("p95 queue h", "p95_queue_s", "h"),
    ("util", "utilization", "{:.3f}"),
    ("busy util", "busy_utilization", "{:.3f}"),
    ("guar. compl.", "guarantee_compliance", "{:.4f}"),
    ("FS 24h", "fair_share_compliance_24h", "{:.3f}"),
    ("FS 1h", "fair_share_compliance_1h", "{:.3f}"),
    ("FS round", "fair_share_round_compliance", "{:.3f}"),
    ("shortfall", "fair_share_shortfall", "{:.4f}"),
    ("preempt", "preemptions", "{}"),
    ("pred. MdAPE", "prediction_mdape", "{:.2f}"),
    ("p90 exceeded", "prediction_p90_exceeded", "{:.3f}"),
    ("makespan d", "makespan_s", "d"),
    ("wall s", "sim_wall_s", "{:.1f}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "h":
        return f"{value / 3600:.2f}"
    if fmt == "d":
        return f"{value / 86400:.1f}"
    return fmt.format(value)


def table(summaries: list[dict[str, Any]]) -> str:
    """A Markdown table comparing the policies of one scenario side by side."""
    head = "| " + " | ".join(title for title, _, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = ["| " + " | ".join(_cell(s.get(key), fmt) for _, key, fmt in COLUMNS) + " |" for s in summaries]
    return "\n".join([head, rule, *rows])


def write_summary(out: Path, summaries: list[dict[str, Any]]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")
    return path


def write_records(out: Path, states: dict[str, SimState]) -> list[Path]:
    """`runs.csv` (one row per run segment) and `waits.csv` (one row per waiting interval) beside
    summary.json, each with a `policy` column: every policy of the run in one file, as in summary.json."""
    out.mkdir(parents=True, exist_ok=True)
    runs, waits = out / "runs.csv", out / "waits.csv"
    with runs.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RUNS_COLUMNS)
        for policy, state in states.items():
            writer.writerows(_run_rows(policy, state))
    with waits.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(WAITS_COLUMNS)
        for policy, state in states.items():
            writer.writerows(_wait_rows(policy, state))
    return [runs, waits]


def _run_rows(policy: str, state: SimState) -> list[tuple[Any, ...]]:
    h, jobs, scenario = state.history, state.jobs, state.scenario
    rows = [
        (
            policy,
            jobs.ids[job],
            scenario.tenants[int(jobs.tenant[job])].name,
            scenario.types[pool],
            int(jobs.gpus[job]),
            start,
            end,
            ended,
            lost,
        )
        for job, pool, start, end, ended, lost in zip(
            h.run_job, h.run_pool, h.run_start, h.run_end, h.run_ended, h.run_lost_gpu_s, strict=True
        )
    ]
    rows.sort(key=lambda row: (row[5], row[6], row[1]))  # by start, then end, then job
    return rows


def _wait_rows(policy: str, state: SimState) -> list[tuple[Any, ...]]:
    h, jobs, scenario = state.history, state.jobs, state.scenario
    rows = [
        (policy, jobs.ids[job], scenario.tenants[int(jobs.tenant[job])].name, int(jobs.gpus[job]), start, end)
        for job, start, end in zip(h.wait_job, h.wait_start, h.wait_end, strict=True)
    ]
    rows.sort(key=lambda row: (row[4], row[5], row[1]))  # by from, then until, then job
    return rows
