"""Following a job to its end (submit --wait, wait, logs -f): its queue place and expected start while it
waits, what it won and where, its output as it comes, and its charge at the end."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from gpumarket_client.cli.common import credits, local_time
from gpumarket_client.errors import EXIT_JOB_FAILED

if TYPE_CHECKING:
    from gpumarket_client.models import Job


def waiting_line(job: Job) -> str:
    places = ", ".join(f"#{q.position} for {q.gpu_type} ({q.gpus_ahead} GPUs ahead)" for q in job.queue)
    starts = ""
    if job.estimate is not None and job.estimate.starts:
        first = next((s for s in job.estimate.starts if s.at), None)
        starts = f"; expected start on {first.gpu_type} {local_time(first.at)}" if first else ""
    line = f"job {job.id} pending: queue place {places or 'not yet ranked'}{starts}"
    return f"{line}\n  last round: {job.reason}" if job.reason else line


def running_line(job: Job) -> str:
    lease = job.leases[-1] if job.leases else None
    if lease is None:
        return f"job {job.id} {job.state}"
    return (
        f"job {job.id} {job.state} on {lease.node or '?'}: {lease.gpus} {lease.gpu_type} GPUs, tier {lease.tier} "
        f"at {lease.price_credits} credits per GPU-hour"
    )


def end_line(job: Job) -> str:
    code = job.exit_code
    exit_text = f", exit code {code}" if code is not None else ""
    return f"job {job.id} {job.state}{exit_text}; charged {credits(job.charged)} credits"


def outcome_code(job: Job) -> int:
    """The job's own exit code when it exited; EXIT_JOB_FAILED when it ended without one."""
    code = job.exit_code
    if job.state == "completed":
        return code if code is not None else 0
    return code if code not in (None, 0) else EXIT_JOB_FAILED


def follow(job: Job, *, interval: float = 2.0, quiet: bool = False, log_only: bool = False) -> Job:
    """Print as the job moves (to stderr when `quiet`: stdout is then the caller's JSON); the log always
    goes to stdout unless quiet. Ctrl-C stops following, not the job, and says so."""
    try:
        return _follow(job, interval=interval, quiet=quiet, log_only=log_only)
    except KeyboardInterrupt:
        click.echo(
            f"\nStopped following job {job.id}; it carries on ({job.state}). `gpumarket wait {job.id}` follows it "
            f"again, `gpumarket cancel {job.id}` cancels it.",
            err=True,
        )
        raise click.exceptions.Exit(130) from None


def _follow(job: Job, *, interval: float, quiet: bool, log_only: bool) -> Job:
    from gpumarket_client.models import new_output

    say_out = (lambda text: click.echo(text, err=True)) if quiet else click.echo
    last, seen = "", ""
    while True:
        job.refresh()
        status = waiting_line(job) if job.state == "pending" else running_line(job)
        if status != last and not log_only and not job.done:
            say_out(status)
            last = status
        new = new_output(seen, job.log_tail)
        if new:
            if quiet:
                sys.stderr.write(new)
            else:
                sys.stdout.write(new)
                sys.stdout.flush()
            seen = job.log_tail
        if job.done:
            if seen and not seen.endswith("\n"):
                say_out("")
            if not log_only:
                say_out(end_line(job))
            return job
        time.sleep(interval)
