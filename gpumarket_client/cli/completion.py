"""Shell completion: `eval "$(gpumarket completion bash)"` in ~/.bashrc, `... zsh` in ~/.zshrc."""

from __future__ import annotations

import click


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (commands, options, GPU types are not completed)."""
    from click.shell_completion import get_completion_class

    from gpumarket_client.cli import cli

    found = get_completion_class(shell)
    assert found is not None  # both are click's own
    click.echo(found(cli, {}, "gpumarket", "_GPUMARKET_COMPLETE").source())
