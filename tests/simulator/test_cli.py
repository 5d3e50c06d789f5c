"""The command line: JSON lines and a comparison table on stdout, summary.json and plots in --out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from allocator.sim.cli import main

from .conftest import Write, one_node_toml

TENANTS = """
[[tenants]]
name = "a"
guaranteed = { gpu = 4 }

[[tenants]]
name = "b"
guaranteed = { gpu = 4 }
"""
CSV = "job_id,submit_s,tenant,gpus,duration_s\n" + "\n".join(
    f"j{i},{i * 200},{'ab'[i % 2]},{1 + i % 4},{900 + 100 * i}" for i in range(16)
)


def test_every_policy_side_by_side(write: Write, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policies = ["static", "pooled-fifo", "market", "pure-auction"]
    path = write(one_node_toml(TENANTS), CSV)
    out = tmp_path / "out"
    stdout = io.StringIO()
    argv = [str(path), "--out", str(out), "--quiet"] + [a for p in policies for a in ("--policy", p)]
    assert main(argv, stdout) == 0
    lines = stdout.getvalue().splitlines()
    printed = [json.loads(line) for line in lines[: len(policies)]]
    assert [s["policy"] for s in printed] == policies
    assert all(s["completed"] == 16 for s in printed)
    assert any(line.startswith("| static |") for line in lines)
    written = json.loads((out / "summary.json").read_text())
    assert [s["policy"] for s in written] == policies
    for name in ("utilization", "tenants", "prices", "queue_cdf"):
        assert (out / f"{name}.png").stat().st_size > 1000
    # --quiet: no progress bar. (Not "stderr is empty": on a machine without matplotlib's font cache the first
    # plot logs that it built one, and that line is not the simulator's to silence.)
    err = capsys.readouterr().err
    assert "%|" not in err


def test_manage_py_simulate_forwards_to_the_simulator(write: Write, tmp_path: Path) -> None:
    """`manage.py simulate` is the documented door; it must reach the same code and report input errors, as the
    README writes it: with nothing configured (no SECRET_KEY, DEBUG off: the simulator needs no settings)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "SECRET_KEY_FILE")}
    env["GPUMARKET_VAR_DIR"] = str(tmp_path / "var")
    path = write(one_node_toml(TENANTS), CSV)
    cmd = [sys.executable, str(root / "manage.py"), "simulate", str(path), "--policy", "market", "--quiet"]
    done = subprocess.run([*cmd, "--no-plots"], env=env, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["completed"] == 16
    bad = subprocess.run([*cmd[:3], str(tmp_path / "missing.toml")], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "missing.toml" in bad.stderr and "Traceback" not in bad.stderr
