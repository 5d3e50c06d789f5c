"""login, logout, profiles, whoami."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpumarket_client.cli.common import emit_json, options, table
from gpumarket_client.errors import ClientError

DEFAULT_URL = "http://127.0.0.1:8000"


def _read_token(token: str | None, token_file: Path | None) -> str:
    if token is not None and token_file is not None:
        raise click.UsageError("give --token or --token-file, not both")
    if token_file is not None:
        text = token_file.read_text()
    elif token is not None:
        text = token
    elif sys.stdin.isatty():
        text = click.prompt("API token (from the portal's Tokens page)", hide_input=True)
    else:
        text = sys.stdin.read()  # `gpumarket login < token` or `... | gpumarket login`
    text = text.strip()
    if not text:
        raise click.UsageError("the token is empty")
    return text


@click.command()
@click.option("--url", default=DEFAULT_URL, show_default=True, help="The server's address.")
@click.option("--token", default=None, help="The API token (else --token-file, stdin, or a prompt).")
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A file holding the API token.",
)
@click.option("--device", is_flag=True, help="Sign in through the organisation's identity provider instead.")
@click.option(
    "--issuer", envvar="GPUMARKET_OIDC_ISSUER", default=None, help="--device: the provider's issuer URL."
)
@click.option(
    "--client-id",
    envvar="GPUMARKET_OIDC_CLIENT_ID",
    default=None,
    help="--device: the command line's client there.",
)
@click.option("--tenant", default=None, help="--device: the team the token acts in (if you are in several).")
@click.option("--no-default", is_flag=True, help="Save the profile without making it the default.")
@options
def login(
    url: str,
    token: str | None,
    token_file: Path | None,
    device: bool,
    issuer: str | None,
    client_id: str | None,
    tenant: str | None,
    no_default: bool,
    profile: str | None,
    as_json: bool,
) -> None:
    """Sign in to a server and save the token as a profile (mode 0600 under $XDG_CONFIG_HOME/gpumarket).

    The token is checked with the server before it is saved. Several servers or teams: one profile each
    (`--profile NAME`), chosen with `--profile` or $GPUMARKET_PROFILE."""
    from gpumarket_client import profiles
    from gpumarket_client.client import Client

    if device:
        from gpumarket_client.device import device_login

        secret = device_login(url, issuer=issuer, client_id=client_id, tenant=tenant).token
    else:
        secret = _read_token(token, token_file)
    with Client(url, secret) as c:
        me = c.me()
    team = me.token_tenant or (me.tenants[0].slug if me.tenants else "")
    name = profile or profiles.DEFAULT_PROFILE
    saved = profiles.Profile(name=name, url=url.rstrip("/"), token=secret, tenant=team, username=me.username)
    path = profiles.save(saved, make_default=not no_default)
    if as_json:
        emit_json(
            {"profile": name, "url": saved.url, "username": me.username, "tenant": team, "path": str(path)}
        )
        return
    click.echo(
        f"Signed in to {saved.url} as {me.username}, team {team or '(none)'}: profile {name!r} ({path})."
    )


@click.command()
@options
def logout(profile: str | None, as_json: bool) -> None:
    """Forget a profile (its token stays valid on the server: revoke it in the portal)."""
    from gpumarket_client import profiles

    name = profile or profiles.listing()[0] or profiles.DEFAULT_PROFILE
    if not profiles.remove(name):
        raise ClientError(f"profile {name!r}: no such profile")
    if as_json:
        emit_json({"profile": name, "removed": True})
    else:
        click.echo(f"Removed profile {name!r}.")


@click.command("profiles")
@options
def profiles_cmd(profile: str | None, as_json: bool) -> None:
    """The saved profiles (tokens are not shown)."""
    from gpumarket_client import profiles

    default, found = profiles.listing()
    rows = [
        {
            "profile": p.name,
            "url": p.url,
            "tenant": p.tenant,
            "username": p.username,
            "default": p.name == default,
        }
        for p in found
    ]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No profiles yet: run `gpumarket login`.")
        return
    table(
        ["", "PROFILE", "URL", "TEAM", "USER"],
        [["*" if r["default"] else "", r["profile"], r["url"], r["tenant"], r["username"]] for r in rows],
    )


@click.command()
@options
def whoami(profile: str | None, as_json: bool) -> None:
    """Who the profile's token signs in as, and its team."""
    from gpumarket_client.cli.common import client

    with client(profile) as c:
        me = c.me()
        url = c.url
    if as_json:
        emit_json({**me.to_json(), "url": url})
        return
    roles = ", ".join(f"{t.slug} ({t.role})" for t in me.tenants) or "none"
    admin = " · platform admin" if me.is_admin else ""
    click.echo(
        f"{me.username} <{me.email}> on {url}{admin}\ntoken for team: {me.token_tenant}\nteams: {roles}"
    )
