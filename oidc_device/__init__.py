"""Signing in from a terminal with OAuth 2.0's device authorization grant (RFC 8628), for `gpumarket login
--device`. No Django and no server code: it runs on a laptop with httpx alone (an import contract says so).

    from oidc_device import device_login, exchange_for_api_token

    tokens = device_login(issuer, client_id, prompt=lambda p: print(f"Open {p.verification_uri} and enter {p.user_code}"))
    api = exchange_for_api_token(server_url, tokens.id_token, tenant="alpha")
"""

from oidc_device.flow import (
    DeviceFlowError,
    DevicePrompt,
    DeviceTokens,
    device_login,
    discover,
    exchange_for_api_token,
)

__all__ = [
    "DeviceFlowError",
    "DevicePrompt",
    "DeviceTokens",
    "device_login",
    "discover",
    "exchange_for_api_token",
]
