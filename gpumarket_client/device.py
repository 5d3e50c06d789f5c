"""`gpumarket login --device`: sign-in through the organisation's identity provider with the OAuth device
authorization grant (RFC 8628). The server side (OpenID Connect, issue 37 part 3) is built separately; until
a server advertises it, this says so plainly instead of pretending."""

from __future__ import annotations

from gpumarket_client.errors import ClientError


class DeviceLoginUnavailable(ClientError):
    pass


def device_login(url: str) -> str:
    """The API token the device flow ends with. The hook for part 3: discover the server's device endpoint,
    show the user code and verification address, poll for the token, return it."""
    raise DeviceLoginUnavailable(f"{url}: device sign-in is not configured on this server; use an API token")
