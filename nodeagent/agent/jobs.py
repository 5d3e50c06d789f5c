"""Starting, signalling and watching jobs (docs/agent.md §How jobs are run).

A job's command is split with shlex and executed directly, never through a shell: a tenant's `; rm -rf` or
`$(...)` is an argument, not code run in the agent's environment. It runs under the shim (shim.py), which leads
a new session and process group, with only the environment built here.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

from nodeagent.agent import procfs, sandbox_cgroups
from nodeagent.agent.fsutil import read_json
from nodeagent.agent.gang import gang_environment
from nodeagent.agent.records import Job, Outcome
from nodeagent.agent.sandbox import Sandbox

SHIM = str(Path(__file__).with_name("shim.py"))
PASSED_ON = ("PATH", "HOME", "LANG")  # what a job inherits from the agent's environment, nothing else
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_environment(job: Job) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASSED_ON if k in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    # A UTF-8 locale, so the shim's Python does not coerce a C locale by adding LC_CTYPE to the job's env.
    env.setdefault("LANG", "C.UTF-8")
    if job.sandboxed:
        env["HOME"] = job.work_dir  # a tenant's user has no home; the system is read-only in the sandbox
    elif job.run_as:
        env["HOME"] = pwd.getpwuid(job.run_as[0]).pw_dir
    env.update(gang_environment(job.gang))
    env.update(
        CUDA_VISIBLE_DEVICES=",".join(job.gpus),
        GPUMARKET_JOB_ID=str(job.job),
        GPUMARKET_LEASE_ID=str(job.lease),
        GPUMARKET_CHECKPOINT_DIR=job.checkpoint_dir,
    )
    return env


def spawn(
    job: Job, sandbox: Sandbox | None = None, minors: list[int] | None = None
) -> subprocess.Popen[bytes]:
    """Start the job's shim; fill in its pid, start time and the job's start. With run_as, the job (not the
    shim) runs as that user, owning its checkpoint and working directories. With a sandbox (job.sandboxed),
    the shim runs the job in it on the device nodes of these GPU minor numbers; in job.cgroups either way."""
    shim = [sys.executable, "-I", SHIM, job.exit_path]
    for directory in (job.checkpoint_dir, job.work_dir):
        Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
        if job.run_as:
            os.chown(directory, *job.run_as)
    for group in job.cgroups:
        shim += ["--cgroup", group]
    argv = job.argv
    if job.sandboxed:
        assert sandbox is not None
        shim.append("--sandboxed")
        argv = sandbox.command(
            job.argv,
            minors=minors or [],
            writable=[job.work_dir, job.checkpoint_dir],
            cwd=job.work_dir,
            run_as=job.run_as,
        )
    elif job.run_as:
        shim += ["--as", f"{job.run_as[0]}:{job.run_as[1]}"]
    Path(job.exit_path).unlink(missing_ok=True)
    with open(job.log_path, "ab") as log:
        process = subprocess.Popen(
            [*shim, "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=job.work_dir,
            env=job_environment(job),
            start_new_session=True,
            close_fds=True,
        )
    job.pid = process.pid
    found = procfs.stat(process.pid)
    job.pid_start = found.start_ticks if found else 0
    job.started_at = job.seen_at = time.time()
    return process


def is_alive(job: Job) -> bool:
    return job.pid > 0 and procfs.is_same_process(job.pid, job.pid_start)


def signal_job(job: Job, signum: int) -> None:
    """signum to the job's process group, and to every process of its session started after the job (one that
    moved to a group of its own included; a later process that reused an old pid excluded)."""
    group = is_alive(job)
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, signum)
    for member in procfs.sessions({job.pid})[job.pid]:
        # Once each: a second SIGTERM could land while the job's Python exits, its handler already gone.
        if member.start_ticks >= job.pid_start and not (group and member.pgrp == job.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member.pid, signum)


def stop(job: Job, reason: str, now: float, grace_seconds: float | None = None) -> None:
    """SIGTERM now, SIGKILL when the grace period ends (kill_due). A second stop keeps the first reason and
    deadline: a release during a preemption's grace does not give the job more time."""
    if job.stopped_by is not None:
        return
    job.stopped_by = reason
    job.kill_at = now + (job.grace_seconds if grace_seconds is None else grace_seconds)
    signal_job(job, signal.SIGTERM)


def kill_due(job: Job, now: float) -> bool:
    """SIGKILL the job if its grace period is over; True when it did."""
    if job.kill_at is None or job.killed or now < job.kill_at:
        return False
    signal_job(job, signal.SIGKILL)
    job.killed = True
    return True


def outcome(job: Job, child: subprocess.Popen[bytes] | None, now: float) -> Outcome | None:
    """How the job ended, or None while it runs. The shim's exit.json when it wrote one; else the job was
    killed with its shim: by our SIGKILL (signal 9), else by something unknown (exit code and signal null:
    the server counts it as failed), ended when it was last seen alive. The reason is "out of memory" when the
    kernel's OOM killer killed a process of the job's memory cgroup."""
    if child is not None:
        if child.poll() is None:
            return None
        child_signal = -child.returncode if child.returncode < 0 else None
    elif is_alive(job):
        return None
    else:
        child_signal = None
    reason = "out of memory" if sandbox_cgroups.oom_killed(job.cgroups) else None
    written = read_json(Path(job.exit_path))
    if written is not None:
        return Outcome(written["exit_code"], written["signal"], float(written["ended_at"]), reason)
    if job.killed or child_signal is not None:
        ended = now if child is not None else (job.kill_at or job.seen_at)
        return Outcome(None, child_signal or signal.SIGKILL, ended, reason)
    return Outcome(None, None, job.seen_at, reason)
