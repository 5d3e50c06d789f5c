"""RFC 8628 against an OpenID provider found by discovery, then the server's exchange of the ID token for an
API token (POST /api/v1/auth/oidc/token, docs/sso.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_SCOPE = "openid profile email groups"
# RFC 8628 §3.2: a provider that names no interval means 5 seconds; §3.5: slow_down adds 5 to it.
DEFAULT_INTERVAL_S = 5
SLOW_DOWN_S = 5


class DeviceFlowError(Exception):
    """The sign-in did not finish. `code` is the OAuth error (access_denied, expired_token, ...) or one of
    ours: discovery (the provider's configuration), unsupported (no device flow there), http (unreachable),
    exchange (the gpumarket server refused the ID token; `field` and `detail` say why)."""

    def __init__(self, code: str, detail: str, *, field: str | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.field = field


@dataclass(frozen=True)
class DevicePrompt:
    """What to show the person: open `verification_uri` and type `user_code` (or open the complete URI,
    which carries the code, e.g. as a QR code) within `expires_in` seconds."""

    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: int
    interval: int


@dataclass(frozen=True)
class DeviceTokens:
    id_token: str
    access_token: str
    refresh_token: str | None
    expires_in: int | None
    scope: str | None


def _json(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise DeviceFlowError("http", f"{what} answered {response.status_code} without JSON") from exc
    if not isinstance(body, dict):
        raise DeviceFlowError("http", f"{what} answered something other than a JSON object")
    return body


def discover(issuer: str, *, http: httpx.Client) -> dict[str, Any]:
    """The provider's OpenID configuration; its `issuer` must be the one asked for."""
    issuer = issuer.rstrip("/")
    try:
        response = http.get(f"{issuer}/.well-known/openid-configuration")
    except httpx.HTTPError as exc:
        raise DeviceFlowError("http", f"{issuer}: {exc}") from exc
    doc = _json(response, "discovery")
    if response.status_code != 200 or doc.get("issuer") != issuer:
        raise DeviceFlowError("discovery", f"{issuer} does not describe itself as that issuer")
    if not doc.get("device_authorization_endpoint"):
        raise DeviceFlowError("unsupported", f"{issuer} offers no device authorization endpoint")
    return doc


def _start(doc: dict[str, Any], client_id: str, scope: str, http: httpx.Client) -> tuple[str, DevicePrompt]:
    try:
        response = http.post(
            doc["device_authorization_endpoint"], data={"client_id": client_id, "scope": scope}
        )
    except httpx.HTTPError as exc:
        raise DeviceFlowError("http", f"device authorization: {exc}") from exc
    body = _json(response, "device authorization")
    if response.status_code != 200:
        raise DeviceFlowError(
            str(body.get("error", "http")), str(body.get("error_description", response.status_code))
        )
    try:
        return str(body["device_code"]), DevicePrompt(
            user_code=str(body["user_code"]),
            verification_uri=str(body.get("verification_uri") or body["verification_url"]),
            verification_uri_complete=body.get("verification_uri_complete"),
            expires_in=int(body.get("expires_in", 600)),
            interval=int(body.get("interval", DEFAULT_INTERVAL_S)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeviceFlowError("http", f"device authorization answer lacks {exc}") from exc


def device_login(
    issuer: str,
    client_id: str,
    *,
    prompt: Callable[[DevicePrompt], None],
    scope: str = DEFAULT_SCOPE,
    http: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DeviceTokens:
    """Run the device flow: ask the provider for a code, call `prompt` once with what the person must do,
    poll the token endpoint every `interval` seconds (5 more after each slow_down) until they approve, deny,
    or the code expires. Returns the tokens; raises DeviceFlowError otherwise."""
    own = http is None
    client = http or httpx.Client(timeout=30, transport=httpx.HTTPTransport(retries=2))
    try:
        doc = discover(issuer, http=client)
        device_code, shown = _start(doc, client_id, scope, client)
        prompt(shown)
        return _poll(doc["token_endpoint"], client_id, device_code, shown, client, sleep, clock)
    finally:
        if own:
            client.close()


def _poll(
    endpoint: str,
    client_id: str,
    device_code: str,
    shown: DevicePrompt,
    http: httpx.Client,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> DeviceTokens:
    interval = max(1, shown.interval)
    deadline = clock() + shown.expires_in
    form = {"grant_type": DEVICE_GRANT, "device_code": device_code, "client_id": client_id}
    while clock() < deadline:
        sleep(interval)
        try:
            response = http.post(endpoint, data=form)
        except httpx.TransportError:
            interval += SLOW_DOWN_S  # §3.5: back off on a connection timeout too
            continue
        body = _json(response, "token endpoint")
        error = body.get("error")
        if response.status_code == 200 and isinstance(body.get("id_token"), str):
            return DeviceTokens(
                id_token=body["id_token"],
                access_token=str(body.get("access_token", "")),
                refresh_token=body.get("refresh_token"),
                expires_in=body.get("expires_in"),
                scope=body.get("scope"),
            )
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += SLOW_DOWN_S
            continue
        if response.status_code == 200:
            raise DeviceFlowError("no_id_token", "the provider gave no ID token: ask for the openid scope")
        raise DeviceFlowError(
            str(error or "http"), str(body.get("error_description") or response.status_code)
        )
    raise DeviceFlowError("expired_token", "the code expired before the sign-in was approved")


def exchange_for_api_token(
    server_url: str,
    id_token: str,
    *,
    tenant: str | None = None,
    name: str = "gpumarket login --device",
    http: httpx.Client | None = None,
) -> dict[str, Any]:
    """Trade the ID token for a gpumarket API token (shown once): the server's JSON, with `token`, `tenant`,
    `username`, `name`, `id`. Raises DeviceFlowError("exchange", ...) with the field the server named."""
    body: dict[str, Any] = {"id_token": id_token, "name": name}
    if tenant is not None:
        body["tenant"] = tenant
    own = http is None
    client = http or httpx.Client(timeout=30)
    try:
        response = client.post(f"{server_url.rstrip('/')}/api/v1/auth/oidc/token", json=body)
    except httpx.HTTPError as exc:
        raise DeviceFlowError("http", f"{server_url}: {exc}") from exc
    finally:
        if own:
            client.close()
    answer = _json(response, "the gpumarket server")
    if response.status_code != 201:
        fields = answer.get("fields") or {}
        field = next(iter(fields), None) if isinstance(fields, dict) else None
        raise DeviceFlowError("exchange", str(answer.get("detail", response.status_code)), field=field)
    return answer
