"""`gpumarket`, the command line (docs/cli.md). Each command lives in a module of this package that is imported
only when that command runs, so `gpumarket --help` loads click and nothing else (bench/cli.py)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import click

from gpumarket_client.errors import EXIT_ERROR, EXIT_USAGE, ClientError

# command name -> (module, attribute): what `gpumarket NAME` runs, loaded on demand.
COMMANDS = {
    "login": ("gpumarket_client.cli.account", "login"),
    "logout": ("gpumarket_client.cli.account", "logout"),
    "profiles": ("gpumarket_client.cli.account", "profiles_cmd"),
    "whoami": ("gpumarket_client.cli.account", "whoami"),
    "submit": ("gpumarket_client.cli.submit", "submit"),
    "estimate": ("gpumarket_client.cli.submit", "estimate"),
    "jobs": ("gpumarket_client.cli.jobs", "jobs"),
    "show": ("gpumarket_client.cli.jobs", "show"),
    "logs": ("gpumarket_client.cli.jobs", "logs"),
    "cancel": ("gpumarket_client.cli.jobs", "cancel"),
    "wait": ("gpumarket_client.cli.jobs", "wait"),
    "spend": ("gpumarket_client.cli.money", "spend"),
    "prices": ("gpumarket_client.cli.money", "prices"),
    "policy": ("gpumarket_client.cli.admin", "policy"),
    "nodes": ("gpumarket_client.cli.admin", "nodes"),
    "drain": ("gpumarket_client.cli.admin", "drain"),
    "completion": ("gpumarket_client.cli.completion", "completion"),
}

# One line each for `gpumarket --help`, so the help does not import every command to read its docstring.
SUMMARIES = {
    "login": "Sign in to a server with an API token and save it as a profile.",
    "logout": "Forget a profile's token.",
    "profiles": "List the saved profiles.",
    "whoami": "Who the token signs in as, and its team.",
    "submit": "Submit a job (flags or a TOML/YAML job file); prints its estimate first.",
    "estimate": "What a job would cost and when it may start, without submitting it.",
    "jobs": "The team's jobs: state, tier, GPUs, node, rounds waited and why.",
    "show": "One job in full: bid, queue place, leases, charges, estimate.",
    "logs": "A job's output (-f to follow it).",
    "cancel": "Cancel a job.",
    "wait": "Wait for a job to end; exits with its exit code.",
    "spend": "Charges per day and GPU type, the budget left and spend alerts.",
    "prices": "Reserve, posted and last spot price per GPU type.",
    "policy": "Policy versions: list, diff, revert (platform admins).",
    "nodes": "GPU nodes and their state (platform admins).",
    "drain": "Drain a node: no new jobs (platform admins).",
    "completion": "Print the shell completion script for bash or zsh.",
}

EPILOG = (
    "Exit codes: 0 ok, 1 error, 2 usage, 3 refused by the API, 4 not signed in or not allowed, 5 not found, "
    "6 server unreachable; `submit --wait` and `wait` exit with the job's own exit code (7 when it ended "
    "without one). Every command takes --json. Docs: docs/cli.md."
)


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name]
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in COMMANDS])


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="gpumarket")
def cli() -> None:
    """gpumarket: submit GPU jobs, follow them and watch your team's spend."""


def _without_httpx_cli() -> None:
    """httpx's __init__ imports httpx's own command line (httpx._main) whenever click and rich are installed,
    and with it all of rich: half of what `gpumarket jobs --json` spends importing (bench/cli.py). This
    process never runs httpx's command line, so a stand-in takes its place; rich is then loaded only by the
    commands that draw a table. Done here, in the console script only: a notebook that imports the client
    keeps its httpx as it is."""
    import types

    def unavailable() -> None:
        raise RuntimeError("httpx's command line is not loaded inside gpumarket")

    stand_in = types.ModuleType("httpx._main")
    stand_in.main = unavailable  # type: ignore[attr-defined]  # the one name httpx takes from it
    sys.modules.setdefault("httpx._main", stand_in)


def main(argv: list[str] | None = None) -> None:
    """The console script: errors are one line on stderr (JSON with --json) and an exit code, never a
    traceback (GPUMARKET_DEBUG=1 shows one)."""
    args = sys.argv[1:] if argv is None else argv
    _without_httpx_cli()
    try:
        # Not standalone: click would print its own errors and a traceback for ours. A command's
        # click.exceptions.Exit(code) comes back as the return value.
        code = cli.main(args=args, prog_name="gpumarket", standalone_mode=False)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except ClientError as exc:
        _fail(exc, args)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # the promise is no traceback; the message still says what broke
        if os.environ.get("GPUMARKET_DEBUG"):
            raise
        click.echo(f"error: {type(exc).__name__}: {exc} (GPUMARKET_DEBUG=1 shows where)", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(exc: ClientError, args: list[str]) -> None:
    body: dict[str, Any] = {"error": getattr(exc, "code", type(exc).__name__), "detail": exc.message}
    field = getattr(exc, "field", None)
    if field is not None:
        body["field"] = field
        body["fields"] = getattr(exc, "fields", {})
    if "--json" in args:
        click.echo(json.dumps(body), err=True)
    else:
        click.echo(f"error: {exc.message}", err=True)
    sys.exit(exc.exit_code)
