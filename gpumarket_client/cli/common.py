"""What every command shares: --json and --profile, the client from the profile, tables and JSON output."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from gpumarket_client.client import Client

F = TypeVar("F", bound=Callable[..., Any])


def options(func: F) -> F:
    """--json and --profile on a command (every command takes both)."""
    func = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (stable field names) for scripts."
    )(func)
    return click.option(
        "--profile",
        "-p",
        metavar="NAME",
        default=None,
        help="Saved profile to use (default: the default one).",
    )(func)


def client(profile: str | None) -> Client:
    from gpumarket_client.client import Client

    return Client.from_profile(profile)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    grid = Table(title=title, title_justify="left", header_style="bold", show_edge=False, pad_edge=False)
    for name in columns:
        grid.add_column(name, overflow="fold")
    for row in rows:
        grid.add_row(*("" if cell is None else str(cell) for cell in row))
    Console(soft_wrap=False).print(grid)


def credits(micro: int | None) -> str:
    """Micro-credits as credits with up to 6 decimals, without trailing zeros."""
    if micro is None:
        return "-"
    text = f"{Decimal(micro) / 1_000_000:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ago(at: str | None, now: datetime | None = None) -> str:
    """An ISO instant as time elapsed ("3m", "2h05m", "4d")."""
    if not at:
        return "-"
    then = datetime.fromisoformat(at.replace("Z", "+00:00"))
    seconds = max(((now or datetime.now(UTC)) - then).total_seconds(), 0)
    return duration(seconds)


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def local_time(at: str | None) -> str:
    if not at:
        return "unknown"
    return datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
