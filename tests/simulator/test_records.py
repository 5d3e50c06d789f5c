"""runs.csv and waits.csv (--out DIR): read back, they add up to the summary's figures."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from allocator.sim.cli import main
from allocator.sim.report import RUNS_COLUMNS, WAITS_COLUMNS
from allocator.sim.state import ENDINGS

from .conftest import HEADER, TWO, Write, one_node_toml

POLICIES = ("market", "static", "pooled-fifo")
# a's eight long jobs take the node; b's jobs reclaim half of it under the market (preemptions), and some
# small jobs of both come and go.
ROWS = (
    [f"a{i},0,a,1,20000" for i in range(8)]
    + [f"b{i},1000,b,1,1000" for i in range(4)]
    + [f"s{i},{3000 + 700 * i},{'ab'[i % 2]},{1 + i % 3},{600 + 300 * i}" for i in range(10)]
)


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _out(
    write: Write, tmp_path: Path, *flags: str
) -> tuple[dict[str, Any], list[dict[str, str]], list[dict[str, str]]]:
    path = write(one_node_toml(TWO, extra="checkpoint_min = 7"), HEADER + "\n" + "\n".join(ROWS))
    out = tmp_path / "out"
    argv = [str(path), "--out", str(out), "--quiet", "--no-plots", *flags]
    assert main([*argv, *(a for p in POLICIES for a in ("--policy", p))], io.StringIO()) == 0
    summaries = {s["policy"]: s for s in json.loads((out / "summary.json").read_text())}
    runs_head, runs = _read(out / "runs.csv")
    waits_head, waits = _read(out / "waits.csv")
    assert tuple(runs_head) == RUNS_COLUMNS and tuple(waits_head) == WAITS_COLUMNS
    return summaries, runs, waits


def test_runs_add_up_to_the_summary(write: Write, tmp_path: Path) -> None:
    summaries, runs, _ = _out(write, tmp_path)
    assert {r["policy"] for r in runs} == set(POLICIES)
    assert {r["ended"] for r in runs} <= set(ENDINGS)
    for policy, summary in summaries.items():
        mine = [r for r in runs if r["policy"] == policy]
        gpu_s: dict[str, int] = defaultdict(int)
        lost: dict[str, int] = defaultdict(int)
        completed: dict[str, int] = defaultdict(int)
        for r in mine:
            assert r["gpu_type"] == "gpu" and int(r["end"]) >= int(r["start"])
            gpu_s[r["tenant"]] += int(r["gpus"]) * (int(r["end"]) - int(r["start"]))
            lost[r["tenant"]] += int(r["lost_gpu_s"])
            completed[r["job"]] += r["ended"] == "completed"
            assert int(r["lost_gpu_s"]) == 0 or r["ended"] == "preempted"
        for tenant, figures in summary["per_tenant"].items():
            assert round(gpu_s[tenant] / 3600, 1) == figures["gpu_hours"]
            assert round(lost[tenant] / 3600, 3) == figures["lost_gpu_hours"]
        # Every completed job has exactly one `completed` row; every preemption one `preempted` row.
        assert sorted(completed.values()) == [1] * summary["completed"]
        assert summary["completed"] == len(ROWS)
        assert sum(r["ended"] == "preempted" for r in mine) == summary["preemptions"]
        assert round(sum(lost.values()) / 3600, 3) == summary["lost_gpu_hours"]
        assert round(sum(lost.values()) / sum(gpu_s.values()), 4) == summary["lost_share"]
    assert summaries["market"]["preemptions"] > 0 and summaries["market"]["lost_gpu_hours"] > 0


def test_waits_match_the_queue_figures(write: Write, tmp_path: Path) -> None:
    summaries, runs, waits = _out(write, tmp_path)
    submit = {row.split(",")[0]: int(row.split(",")[1]) for row in ROWS}
    for policy, summary in summaries.items():
        by_job: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for w in waits:
            if w["policy"] == policy:
                by_job[w["job"]].append((int(w["from"]), int(w["until"]), "wait"))
        for r in runs:
            if r["policy"] == policy:
                by_job[r["job"]].append((int(r["start"]), int(r["end"]), r["ended"]))
        queue = []
        for name, spans in by_job.items():
            spans.sort()
            # A job waits from its submit, then waits and runs alternate without gaps until it completes.
            assert spans[0][0] == submit[name] and spans[0][2] == "wait"
            assert [kind == "wait" for *_, kind in spans] == [i % 2 == 0 for i in range(len(spans))]
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
            assert spans[-1][2] == "completed"
            queue.append(spans[0][1] - spans[0][0])
        assert round(sum(queue) / len(queue), 1) == summary["avg_queue_s"]
        assert len(queue) == summary["jobs"]


def test_a_job_stopped_at_its_hold_ends_so(write: Write, tmp_path: Path) -> None:
    tenant = '[[tenants]]\nname = "a"\nguaranteed = { gpu = 8 }\nbudget = 6\n'
    rows = [f"j{i},{i * 4000},a,1,3600" for i in range(3)] + ["long,20000,a,1,18000"]
    path = write(one_node_toml(tenant), "\n".join([HEADER, *rows]))
    out = tmp_path / "out"
    flags = ["--holds", "predicted", "--max-hours", "3", "--no-plots", "--quiet"]
    assert main([str(path), "--out", str(out), "--policy", "market", *flags], io.StringIO()) == 0
    _, runs = _read(out / "runs.csv")
    assert [(r["job"], r["ended"]) for r in runs] == [
        ("j0", "completed"),
        ("j1", "completed"),
        ("j2", "completed"),
        ("long", "hold_ran_out"),
    ]
    _, waits = _read(out / "waits.csv")
    assert [w["job"] for w in waits] == ["j0", "j1", "j2", "long"]


@pytest.mark.parametrize("columns", [RUNS_COLUMNS, WAITS_COLUMNS])
def test_the_columns_are_the_documented_ones(columns: tuple[str, ...]) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in doc for name in columns)
