"""spend and prices."""

from __future__ import annotations

import click

from gpumarket_client.cli.common import client, emit_json, options, table


@click.command()
@click.option("--days", "-d", type=click.IntRange(1, 366), default=30, show_default=True, help="Days back.")
@options
def spend(days: int, profile: str | None, as_json: bool) -> None:
    """What the team was charged per day and GPU type, the budget left, and its spend alerts."""
    with client(profile) as c:
        charged = c.spend(days=days)
        balance = c.balance()
        alerts = c.spend_alerts()
    if as_json:
        emit_json(
            {
                "spend": charged.to_json(),
                "balance": balance.to_json(),
                "alerts": [a.to_json() for a in alerts],
            }
        )
        return
    if charged.days:
        table(
            ["DAY", "GPU TYPE", "CHARGED (credits)"],
            [[d.day, d.gpu_type, d.charged_credits] for d in charged.days],
            title=f"Charges since {charged.since}",
        )
    else:
        click.echo(f"No charges since {charged.since}.")
    click.echo(f"Total: {charged.total_credits} credits over {days} days.")
    click.echo(
        f"Budget: {balance.available_credits} credits available, {balance.held_credits} held for running "
        f"jobs, {balance.spent_credits} spent in all."
    )
    if alerts:
        table(
            ["ALERT", "RULE", "ACTION", "STATE"],
            [
                [a.id, a.description, a.action, "BLOCKING" if a.blocked else ("on" if a.active else "off")]
                for a in alerts
            ],
            title="Spend alerts",
        )
    else:
        click.echo("No spend alerts (the portal's Alerts page sets them).")


@click.command()
@options
def prices(profile: str | None, as_json: bool) -> None:
    """Per GPU type: the reserve price (the least that can win), the posted price (what the borrowed tier
    pays) and the last round's spot (clearing) price, credits per GPU-hour."""
    with client(profile) as c:
        board = c.prices()
    if as_json:
        emit_json([p.to_json() for p in board])
        return
    table(
        ["GPU TYPE", "RESERVE", "POSTED", "LAST SPOT", "MAX", "LAST ROUND"],
        [
            [
                p.gpu_type,
                p.reserve_credits,
                p.posted_credits,
                p.spot_credits or "-",
                p.max_credits,
                p.last_round or "-",
            ]
            for p in board
        ],
    )
