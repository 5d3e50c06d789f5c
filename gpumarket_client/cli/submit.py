"""submit and estimate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpumarket_client.cli.common import client, credits, emit_json, options

if TYPE_CHECKING:
    from gpumarket_client.models import Estimate


def job_options(func: Any) -> Any:
    for option in reversed(
        [
            click.argument(
                "job_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
            ),
            click.option("--name", "-n", default=None, help="Job name (similar names predict each other)."),
            click.option("--command", "-c", default=None, help="The command the node runs."),
            click.option("--gpus", "-g", type=int, default=None, help="GPUs, as one gang (default 1)."),
            click.option("--max-hours", default=None, help='Most hours it may run, e.g. "1.5" (default 1).'),
            click.option(
                "--bid",
                "bids",
                multiple=True,
                metavar="TYPE=LIMIT",
                help="Limit in credits per GPU-hour for a GPU type; repeat, most preferred first.",
            ),
            click.option(
                "--grace-seconds", type=int, default=None, help="Time to checkpoint when preempted."
            ),
            click.option("--cpus-per-gpu", default=None, help='CPU cores per GPU for the job, e.g. "4".'),
            click.option("--memory-gb-per-gpu", default=None, help='Memory per GPU in GB, e.g. "32".'),
        ]
    ):
        func = option(func)
    return func


def _job(job_file: Path | None, **flags: Any) -> dict[str, Any]:
    from gpumarket_client.cli import jobfile

    flags["bids"] = [jobfile.bid_flag(b) for b in flags.get("bids") or ()]
    return jobfile.merge(job_file, flags)


def print_estimate(job: dict[str, Any], found: Estimate) -> None:
    gpus = job["gpus"]
    click.echo(
        f"Estimate for {job['name']!r}: {gpus} GPU{'s' if gpus != 1 else ''}, up to {job['max_hours']} h"
    )
    click.echo(f"  runtime: {found.prediction_text or 'no similar finished jobs yet'}")
    if found.cost_text:
        click.echo(f"  cost:    {found.cost_text}")
    for start in found.starts:
        click.echo(f"  start on {start.gpu_type}: {start.text}")
    for g in found.guidance:
        click.echo(f"  {g.gpu_type} at {credits(g.limit)}: {g.advice}")
    if found.warning:
        click.echo(f"  warning: {found.warning}")


@click.command()
@job_options
@options
def estimate(job_file: Path | None, profile: str | None, as_json: bool, **flags: Any) -> None:
    """What a job would likely run, cost and when it may start, per GPU type of its bid, with the guidance the
    portal gives; nothing is submitted. Takes the same job file and flags as `submit`."""
    job = _job(job_file, **flags)
    with client(profile) as c:
        found = c.estimate(**job)
    if as_json:
        emit_json(found.to_json())
    else:
        print_estimate(job, found)


@click.command()
@job_options
@click.option("--dry-run", is_flag=True, help="Print the estimate and stop: submit nothing.")
@click.option("--wait", "wait_", is_flag=True, help="Follow the job to its end; exit with its exit code.")
@click.option(
    "--interval", type=float, default=2.0, show_default=True, help="Seconds between reads (--wait)."
)
@click.option(
    "--idempotency-key",
    default=None,
    help="Key for the submit (default: a new one per invocation); the same key never submits twice.",
)
@options
def submit(
    job_file: Path | None,
    dry_run: bool,
    wait_: bool,
    interval: float,
    idempotency_key: str | None,
    profile: str | None,
    as_json: bool,
    **flags: Any,
) -> None:
    """Submit a job from flags or a TOML/YAML job file (JOB_FILE; flags override it). Prints the estimate
    first; --dry-run stops there. --wait follows it: queue place and expected start while it waits, its
    log while it runs, its charge when it ends, and exits with the job's exit code."""
    from gpumarket_client.cli.follow import follow, outcome_code
    from gpumarket_client.transport import new_idempotency_key

    job = _job(job_file, **flags)
    # One key for this invocation: every HTTP retry of the submit repeats it, so it submits at most once.
    key = idempotency_key or new_idempotency_key()
    with client(profile) as c:
        found = c.estimate(**job)
        if not as_json:
            print_estimate(job, found)
        if dry_run:
            if as_json:
                emit_json({"estimate": found.to_json(), "job": None})
            return
        submitted = c.jobs.submit(idempotency_key=key, **job)
        if not as_json:
            click.echo(f"Submitted job {submitted.id} ({submitted.state}); it takes part in the next round.")
            for warning in submitted.warnings:
                click.echo(f"  warning: {warning}")
        if wait_:
            follow(submitted, interval=interval, quiet=as_json)
        if as_json:
            emit_json({"estimate": found.to_json(), "job": submitted.to_json()})
        if wait_:
            raise click.exceptions.Exit(outcome_code(submitted))
