"""For platform admins: policy versions (list, diff, revert), nodes, drain."""

from __future__ import annotations

import json

import click

from gpumarket_client.cli.common import ago, client, emit_json, local_time, options, table


@click.group()
def policy() -> None:
    """The market policy's versions (platform admins)."""


@policy.command("versions")
@click.option("--limit", "-l", type=click.IntRange(1, 500), default=20, show_default=True)
@options
def versions(limit: int, profile: str | None, as_json: bool) -> None:
    """Policy versions, newest first."""
    with client(profile) as c:
        found = c.policy_versions(page_size=limit)
    if as_json:
        emit_json([v.to_json() for v in found])
        return
    table(
        ["VERSION", "KIND", "STATUS", "BY", "WHEN", "REASON"],
        [[v.number, v.kind, v.status, v.actor or "-", local_time(v.created_at), v.reason] for v in found],
    )


@policy.command("diff")
@click.argument("number", type=int)
@options
def diff(number: int, profile: str | None, as_json: bool) -> None:
    """What would change from the policy in force to version NUMBER."""
    with client(profile) as c:
        version = c.policy_version(number)
    if as_json:
        emit_json(version.to_json())
        return
    click.echo(
        f"version {version.number} ({version.kind}, {version.status}) against {version.current} in force:"
    )
    if not version.diff:
        click.echo("  no difference")
    for change in version.diff:
        click.echo(f"  {change.path}: {json.dumps(change.old)} -> {json.dumps(change.new)}")


@policy.command("revert")
@click.argument("number", type=int)
@click.option("--reason", "-r", required=True, help="Why (kept in the audit log).")
@options
def revert(number: int, reason: str, profile: str | None, as_json: bool) -> None:
    """Make version NUMBER's policy the one in force for everyone (audited)."""
    from gpumarket_client.transport import new_idempotency_key

    with client(profile) as c:
        result = c.policy_revert(number, reason=reason, idempotency_key=new_idempotency_key())
    if as_json:
        emit_json(result.to_json())
        return
    now = result.version.number if result.version else "?"
    click.echo(
        f"version {number} applied as version {now}"
        if result.changed
        else f"no change: version {now} is in force"
    )
    for name in result.skipped_tenants:
        click.echo(f"  skipped tenant {name} (gone)")
    for name in result.skipped_types:
        click.echo(f"  skipped GPU type {name} (gone)")


@click.command()
@options
def nodes(profile: str | None, as_json: bool) -> None:
    """GPU nodes: type, state, GPUs and last heartbeat (platform admins)."""
    with client(profile) as c:
        found = c.nodes()
    if as_json:
        emit_json([n.to_json() for n in found])
        return
    table(
        ["NODE", "TYPE", "DOMAIN", "STATE", "GPUS", "HEARTBEAT", "AGENT"],
        [
            [
                n.name,
                n.gpu_type,
                n.topology_domain,
                n.state,
                len(n.gpus),
                ago(n.last_heartbeat),
                n.agent_version,
            ]
            for n in found
        ],
    )


@click.command()
@click.argument("name")
@options
def drain(name: str, profile: str | None, as_json: bool) -> None:
    """Drain node NAME: rounds place no new jobs on it; running jobs finish (platform admins)."""
    from gpumarket_client.transport import new_idempotency_key

    with client(profile) as c:
        node = c.drain(name, idempotency_key=new_idempotency_key())
    if as_json:
        emit_json(node.to_json())
    else:
        click.echo(f"node {node.name}: {node.state}")
