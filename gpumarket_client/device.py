"""`gpumarket login --device`: sign-in through the organisation's identity provider with the OAuth device
authorization grant (RFC 8628), by oidc_device (docs/sso.md), then the ID token traded for a gpumarket API
token, which is saved as any other. The provider and the command line's client there are the server's
OIDC_ISSUER and OIDC_CLI_CLIENT_ID: given as --issuer and --client-id (or $GPUMARKET_OIDC_ISSUER and
$GPUMARKET_OIDC_CLIENT_ID), since the server does not advertise them."""

from __future__ import annotations

from dataclasses import dataclass

import click

from gpumarket_client.errors import EXIT_API, EXIT_AUTH, EXIT_CONNECTION, ClientError


class DeviceLoginUnavailable(ClientError):
    exit_code = EXIT_API


@dataclass(frozen=True)
class DeviceLogin:
    token: str
    tenant: str
    username: str


def device_login(url: str, *, issuer: str | None, client_id: str | None, tenant: str | None) -> DeviceLogin:
    if not issuer or not client_id:
        raise DeviceLoginUnavailable(
            f"{url}: device sign-in is not configured on this server for the command line: give --issuer and "
            "--client-id (the server's OIDC_ISSUER and OIDC_CLI_CLIENT_ID), or sign in with an API token"
        )
    from oidc_device import DeviceFlowError, DevicePrompt, exchange_for_api_token
    from oidc_device import device_login as run_device_flow

    def show(prompt: DevicePrompt) -> None:
        where = prompt.verification_uri_complete or prompt.verification_uri
        click.echo(
            f"Open {where} and confirm the code {prompt.user_code} (within {prompt.expires_in} s).", err=True
        )

    try:
        tokens = run_device_flow(issuer, client_id, prompt=show)
        issued = exchange_for_api_token(url, tokens.id_token, tenant=tenant)
    except DeviceFlowError as exc:
        raise _refused(exc.code, exc.detail, exc.field) from None
    return DeviceLogin(str(issued["token"]), str(issued.get("tenant", "")), str(issued.get("username", "")))


def _refused(code: str, detail: str, field: str | None) -> ClientError:
    error = ClientError(f"device sign-in: {code}{f' ({field})' if field else ''}: {detail}")
    error.exit_code = EXIT_CONNECTION if code == "http" else EXIT_AUTH
    return error
