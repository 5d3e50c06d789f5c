"""scripts/gpu_check.py, the end-to-end check operators run on a GPU machine, dry run with the simulated
backend: the platform starts on SQLite, the agent registers, a job is billed and a cancelled one stopped.
On a real GPU the same script ran against an H200 (docs/agent.md §Checking a GPU machine end to end)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_gpu_check_dry_run_bills_a_job_and_stops_a_cancelled_one(tmp_path: Path) -> None:
    cmd = [sys.executable, "scripts/gpu_check.py", "--backend", "sim", "--job-seconds", "5"]
    cmd += ["--out", str(tmp_path), "--port", str(_free_port())]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    log = tmp_path / "platform.log"
    assert done.returncode == 0, done.stdout + done.stderr + (log.read_text()[-3000:] if log.exists() else "")
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["gpu_check"] == "ok" and line["job_state"] == "completed"
    assert 5 <= line["gpu_seconds"] < 15 and line["charged_credits"] != "0"
    assert line["cancelled"]["state"] == "cancelled" and line["cancelled"]["end_reason"] == "cancelled"
    findings = json.loads((tmp_path / "findings.json").read_text())
    kinds = [entry["kind"] for entry in findings["platform"]["ledger"]["results"]]
    assert kinds.count("settle") == 2 and kinds.count("hold") == 2  # each job held once and settled once
