"""jobs, show, logs, cancel, wait."""

from __future__ import annotations

import click

from gpumarket_client.cli.common import ago, client, credits, emit_json, local_time, options, table

STATES = ("pending", "allocated", "running", "preempting", "completed", "failed", "cancelled", "expired")


@click.command()
@click.option("--state", "-s", type=click.Choice(STATES), default=None, help="Only jobs in this state.")
@click.option("--gpu-type", default=None, help="Only jobs whose bid accepts this GPU type.")
@click.option(
    "--limit", "-l", type=click.IntRange(1, 500), default=50, show_default=True, help="Newest N jobs."
)
@options
def jobs(state: str | None, gpu_type: str | None, limit: int, profile: str | None, as_json: bool) -> None:
    """The team's jobs, newest first: state, tier, GPUs, node, how long and how many rounds they waited, and
    for a waiting job why its last round did not run it."""
    with client(profile) as c:
        found = c.jobs.list(state=state, gpu_type=gpu_type, page_size=limit)
    if as_json:
        emit_json([j.to_json() for j in found])
        return
    if not found:
        click.echo("No jobs." if state is None else f"No {state} jobs.")
        return
    table(
        ["ID", "NAME", "STATE", "TIER", "GPUS", "NODE", "WAITED", "REASON"],
        [
            [
                j.id,
                j.name,
                j.state,
                j.tier or "-",
                j.gpus,
                j.node or "-",
                f"{ago(j.submitted_at)} ({j.rounds_waited} rounds)"
                if j.state == "pending"
                else f"{j.rounds_waited} rounds",
                j.reason,
            ]
            for j in found
        ],
    )


@click.command()
@click.argument("job_id", type=int)
@options
def show(job_id: int, profile: str | None, as_json: bool) -> None:
    """One job in full: its bid, queue place and expected start, why its last round did not run it, its
    leases and charges, and the end of its log."""
    with client(profile) as c:
        job = c.jobs.get(job_id)
    if as_json:
        emit_json(job.to_json())
        return
    bids = ", ".join(f"{b.gpu_type} at {b.limit_credits}" for b in job.bids)
    click.echo(
        f"job {job.id} {job.name!r}: {job.state}, by {job.submitter}, submitted {local_time(job.submitted_at)}"
    )
    click.echo(f"  command:  {job.command}")
    click.echo(f"  gpus:     {job.gpus}, up to {job.max_hours} h; bid (credits per GPU-hour): {bids}")
    for w in job.warnings:
        click.echo(f"  warning:  {w}")
    for q in job.queue:
        click.echo(f"  queue:    #{q.position} for {q.gpu_type} ({q.gpus_ahead} GPUs ahead)")
    if job.estimate is not None:
        for s in job.estimate.starts:
            click.echo(f"  start:    {s.gpu_type}: {s.text}")
        if job.estimate.prediction_text:
            click.echo(f"  runtime:  {job.estimate.prediction_text}")
        if job.estimate.cost_text:
            click.echo(f"  cost:     {job.estimate.cost_text}")
    if job.reason:
        click.echo(f"  last round: {job.reason}")
    if job.leases:
        table(
            ["LEASE", "NODE", "TYPE", "GPUS", "TIER", "PRICE", "STATE", "END", "EXIT", "CHARGED"],
            [
                [
                    lease.id,
                    lease.node or "-",
                    lease.gpu_type,
                    lease.gpus,
                    lease.tier,
                    lease.price_credits,
                    lease.state,
                    lease.end_reason or "-",
                    "-" if lease.exit_code is None else lease.exit_code,
                    credits(lease.charged),
                ]
                for lease in job.leases
            ],
        )
    if job.log_tail:
        lines = job.log_tail.rstrip("\n").splitlines()[-10:]
        click.echo("  log (last lines; `gpumarket logs` for more):")
        for line in lines:
            click.echo(f"    {line}")


@click.command()
@click.argument("job_id", type=int)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as it runs, until it ends.")
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between reads (-f).")
@options
def logs(job_id: int, follow: bool, interval: float, profile: str | None, as_json: bool) -> None:
    """A job's output: the last 64 KiB its node reported."""
    from gpumarket_client.cli.follow import follow as follow_job

    with client(profile) as c:
        job = c.jobs.get(job_id)
        if follow and not as_json:
            follow_job(job, interval=interval, log_only=True)
            return
    if as_json:
        emit_json({"id": job.id, "state": job.state, "log_tail": job.log_tail})
    else:
        click.echo(job.log_tail, nl=not job.log_tail.endswith("\n"))


@click.command()
@click.argument("job_id", type=int)
@options
def cancel(job_id: int, profile: str | None, as_json: bool) -> None:
    """Cancel a job: at once while it waits, else its leases are stopped and settled."""
    from gpumarket_client.transport import new_idempotency_key

    with client(profile) as c:
        job = c.jobs.cancel(job_id, idempotency_key=new_idempotency_key())
    if as_json:
        emit_json(job.to_json())
    else:
        click.echo(f"job {job.id}: {job.state}")


@click.command()
@click.argument("job_id", type=int)
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between reads.")
@options
def wait(job_id: int, interval: float, profile: str | None, as_json: bool) -> None:
    """Follow a job to its end and exit with its exit code (7 when it ended without one)."""
    from gpumarket_client.cli.follow import follow, outcome_code

    with client(profile) as c:
        job = follow(c.jobs.get(job_id), interval=interval, quiet=as_json)
    if as_json:
        emit_json(job.to_json())
    raise click.exceptions.Exit(outcome_code(job))
