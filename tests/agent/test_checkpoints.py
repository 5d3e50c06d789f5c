"""The agent notices a job's checkpoints (docs/agent.md §Checkpoints): marker lines in its log and files in its
checkpoint directory; unit tests on nodeagent.agent.checkpoints, then the agent process (simulated GPUs)
against the fake server."""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

import pytest

from nodeagent.agent import checkpoints
from nodeagent.agent.records import Job
from tests.agent.fakeserver import wait_for
from tests.agent.test_jobs import registered

PY = shlex.quote(sys.executable)
DEMO = Path(checkpoints.__file__).with_name("demo_job.py")
T0 = 1_800_000_000.0  # the job's start (wall time)


@pytest.fixture
def job(tmp_path: Path) -> Job:
    (tmp_path / "ckpt").mkdir()
    return Job(
        lease=1,
        job=1001,
        name="j",
        argv=["true"],
        gpus=["GPU-0"],
        max_seconds=3600,
        grace_seconds=30,
        checkpoint_dir=str(tmp_path / "ckpt"),
        work_dir=str(tmp_path),
        log_path=str(tmp_path / "job.log"),
        exit_path=str(tmp_path / "exit"),
        started_at=T0,
    )


def _write(path: str | Path, text: str, mtime: float, mode: str = "a") -> None:
    with open(path, mode) as f:
        f.write(text)
    os.utime(path, (mtime, mtime))


def test_a_marker_line_dates_the_checkpoint_by_the_log(job: Job) -> None:
    _write(job.log_path, "epoch 1\nloss 0.3\n", T0 + 10)
    assert checkpoints.observe(job, T0 + 20) == 0.0  # output, but no marker
    _write(job.log_path, "GPUMARKET_CHECKPOINT step=100 path=/ckpt/100.pt\n", T0 + 30)
    assert checkpoints.observe(job, T0 + 40) == T0 + 30
    # The lines read are not read again: more output without a marker leaves the checkpoint where it was.
    _write(job.log_path, "epoch 2\n", T0 + 50)
    assert checkpoints.observe(job, T0 + 60) == T0 + 30
    _write(job.log_path, "  GPUMARKET_CHECKPOINT\n", T0 + 70)  # indented, no note: a marker still
    assert checkpoints.observe(job, T0 + 80) == T0 + 70


def test_a_marker_only_at_the_start_of_a_line_and_only_once_the_line_is_complete(job: Job) -> None:
    _write(job.log_path, "saving; GPUMARKET_CHECKPOINT would be nice\n", T0 + 10)
    assert checkpoints.observe(job, T0 + 20) == 0.0
    _write(job.log_path, "GPUMARKET_CHECKPOI", T0 + 30)  # the job is still writing the line
    assert checkpoints.observe(job, T0 + 35) == 0.0
    _write(job.log_path, "NT step=7\n", T0 + 40)
    assert checkpoints.observe(job, T0 + 45) == T0 + 40


def test_a_truncated_log_is_read_again_from_its_start(job: Job) -> None:
    _write(job.log_path, "x" * 100 + "\n", T0 + 10)
    checkpoints.observe(job, T0 + 20)
    _write(job.log_path, "GPUMARKET_CHECKPOINT\n", T0 + 30, mode="w")
    assert checkpoints.observe(job, T0 + 40) == T0 + 30


def test_a_file_written_in_the_checkpoint_directory(job: Job) -> None:
    ckpt = Path(job.checkpoint_dir)
    assert checkpoints.observe(job, T0 + 5) == 0.0  # empty
    _write(ckpt / "old.pt", "from the job's previous lease", T0 - 600)
    assert checkpoints.observe(job, T0 + 5) == 0.0  # before this lease: not its checkpoint
    (ckpt / "step" / "deep").mkdir(parents=True)
    _write(ckpt / "step" / "deep" / "model.pt", "weights", T0 + 100)
    _write(ckpt / "next.pt.tmp", "half written", T0 + 150)  # still being written: not yet a checkpoint
    assert checkpoints.observe(job, T0 + 200) == T0 + 100
    # Never in the future (a file server with a fast clock), and never backwards.
    _write(ckpt / "fast.pt", "x", T0 + 10_000)
    assert checkpoints.observe(job, T0 + 300) == T0 + 300
    os.remove(ckpt / "fast.pt")
    assert checkpoints.observe(job, T0 + 400) == T0 + 300


def test_the_later_of_the_two_ways_counts_and_the_record_keeps_it(job: Job) -> None:
    _write(Path(job.checkpoint_dir) / "a.pt", "x", T0 + 50)
    _write(job.log_path, "GPUMARKET_CHECKPOINT\n", T0 + 80)
    assert checkpoints.observe(job, T0 + 90) == T0 + 80
    again = Job.from_json(job.to_json())  # the agent restarts: the record carries the checkpoint and offset
    assert (again.checkpoint_at, again.log_offset) == (T0 + 80, job.log_offset)
    old = job.to_json()
    old.pop("checkpoint_at"), old.pop("log_offset")  # a record written by an agent from before
    assert Job.from_json(old).checkpoint_at == 0.0


def _reported(server, lease: int) -> float | None:
    seen = [c["checkpoint_at"] for c in server.lease_reports(lease) if c.get("checkpoint_at")]
    return datetime.fromisoformat(seen[-1]).timestamp() if seen else None


def test_the_agent_reports_the_demo_jobs_marker(server, agent) -> None:
    gpus = registered(server, agent.start())
    # By its path: the job's environment has no PYTHONPATH, and this checkout's demo job is the one to run.
    command = f"{PY} {DEMO} --seconds 60 --idle --marker-every 0.5"
    server.bind(5, command, gpus=gpus)
    wait_for(lambda: 5 in server.started, what="the start report")
    first = wait_for(lambda: _reported(server, 5), what="a usage report with a checkpoint")
    started = datetime.fromisoformat(server.started[5]["at"]).timestamp()
    assert started <= first
    later = wait_for(lambda: (t := _reported(server, 5)) and t > first and t, what="a later checkpoint")
    assert later > first
    server.stop_lease("preempt", 5, grace=10)
    wait_for(lambda: 5 in server.exited, what="the exit report")
    final = datetime.fromisoformat(server.exited[5]["usage"]["checkpoint_at"]).timestamp()
    assert final >= later and "GPUMARKET_CHECKPOINT step=" in server.exited[5]["usage"]["log_tail"]


def test_the_agent_reports_a_file_in_the_checkpoint_directory(server, agent) -> None:
    gpus = registered(server, agent.start())
    script = 'sleep 0.5; echo weights > "$GPUMARKET_CHECKPOINT_DIR/model.pt"; sleep 60'
    server.bind(6, f"sh -c {shlex.quote(script)}", gpus=gpus)
    at = wait_for(lambda: _reported(server, 6), what="a usage report with a checkpoint")
    model = agent.state_dir / "checkpoints" / "1006" / "model.pt"
    assert at == pytest.approx(model.stat().st_mtime, abs=0.01)
    server.stop_lease("release", 6, grace=2)
    wait_for(lambda: 6 in server.exited, what="the exit report")
