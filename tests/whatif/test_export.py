"""export_trace: the platform's history in the simulator's scenario format, read back by the simulator."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from allocator.sim.engine import simulate
from allocator.sim.jobs import read_jobs
from allocator.sim.metrics import summarize
from allocator.sim.policies import POLICIES
from allocator.sim.scenario import read_scenario
from tests.whatif.conftest import History

pytestmark = pytest.mark.django_db


def _export(history: History, out: Path, *extra: str) -> str:
    stdout = io.StringIO()
    call_command(
        "export_trace",
        "--since",
        history.since.isoformat(),
        "--until",
        history.until.isoformat(),
        str(out),
        *extra,
        stdout=stdout,
    )
    return stdout.getvalue()


def test_export_round_trips_through_the_simulator_reader(history: History, tmp_path: Path) -> None:
    out = tmp_path / "mine.toml"
    said = _export(history, out)
    assert "3 jobs" not in said and "4 jobs" in said  # the three that ran and the pending one
    scenario = read_scenario(out)
    assert [(p.gpu_type, p.nodes, p.gpus_per_node) for p in scenario.pools] == [
        ("A100", 1, 4),
        ("H100", 2, 8),
    ]
    tenants = {t.name: t for t in scenario.tenants}
    assert set(tenants) == {"alpha", "beta", "gamma"}
    assert tenants["alpha"].guaranteed == {"H100": 4} and tenants["beta"].weight == 2
    assert tenants["gamma"].budget_micro == 1000 * 1_000_000  # funded before the window began
    assert scenario.reserve_micro == {"A100": 1_200_000, "H100": 2_000_000}
    jobs = read_jobs(scenario)
    ids = {f"job-{j.pk}": j for j in history.ran}
    got = dict(zip(jobs.ids, range(len(jobs)), strict=True))
    assert f"job-{history.cancelled.pk}" not in got  # never ran: no runtime to replay
    assert f"job-{history.pending.pk}" in got
    for job_id, job in ids.items():
        i = got[job_id]
        assert jobs.gpus[i] == job.gpus
        assert jobs.submit_s[i] == int((job.submitted_at - history.since).total_seconds())
        assert jobs.price_micro[i].max() == job.limits[0]["limit"]
    # Measured runtimes, from the agents' GPU-seconds (the fixture reports 1200, 600, 300 s).
    assert [int(jobs.duration_s[got[f"job-{j.pk}"]]) for j in history.ran] == [1200, 600, 300]
    assert jobs.duration_s[got[f"job-{history.pending.pk}"]] == history.pending.max_seconds
    beta = got[f"job-{history.ran[1].pk}"]
    assert [scenario.types[k] for k in jobs.prefs[beta]] == ["H100", "A100"]  # best first
    # And a tiny simulation runs on it.
    state = simulate(scenario, jobs, POLICIES["market"])
    summary = summarize(state, "market", 0.0)
    assert summary["completed"] == 3 and summary["rejected"] == 1  # the pending job bids below the reserve


def test_anonymise_hides_names_and_keeps_figures(history: History, tmp_path: Path) -> None:
    plain, anon = tmp_path / "plain.toml", tmp_path / "anon.toml"
    _export(history, plain)
    _export(history, anon, "--anonymise")
    text = anon.read_text() + (tmp_path / "anon.jobs.csv").read_text()
    for secret in ("alpha", "beta", "gamma", "job-"):
        assert secret not in text
    rows = list(csv.DictReader((tmp_path / "anon.jobs.csv").open()))
    plain_rows = list(csv.DictReader((tmp_path / "plain.jobs.csv").open()))
    keep = ("submit_s", "gpus", "duration_s", "gpu_type", "price")
    assert [[r[k] for k in keep] for r in rows] == [[r[k] for k in keep] for r in plain_rows]
    assert read_jobs(read_scenario(anon)).ids[0] == "j000001"


@pytest.mark.parametrize(
    "args",
    [
        ["--since", "yesterday", "out.toml"],
        ["--since", "2026-01-01", "out.csv"],
        ["out.toml"],
        ["--since", "2026-02-01", "--until", "2026-01-01", "out.toml"],
    ],
)
def test_bad_arguments_print_the_usage_and_fail(args: list[str], tmp_path: Path, world: object) -> None:
    args = [str(tmp_path / a) if a.startswith("out") else a for a in args]
    with pytest.raises(CommandError) as caught:
        call_command("export_trace", *args)
    assert "usage: " in str(caught.value) or "Error:" in str(caught.value) or "error:" in str(caught.value)


@pytest.mark.slow  # a manage.py process per bad argument
def test_bad_arguments_exit_non_zero_from_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    for args in (
        ["--since", "nonsense", "x.toml"],
        ["--since", "2026-02-01", "--until", "2026-01-01", "x.toml"],
    ):
        proc = subprocess.run(
            [sys.executable, "manage.py", "export_trace", *args], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, proc.stderr
        assert "usage: manage.py export_trace" in proc.stderr


def test_a_window_without_nodes_says_so(world: object, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no GPU nodes"):
        call_command("export_trace", "--since", "2026-01-01", str(tmp_path / "x.toml"))
