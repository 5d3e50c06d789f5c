"""`python -m oidc_device --issuer URL --client-id ID --server URL [--tenant SLUG]`: sign in with the device
flow and print the gpumarket API token's JSON (until `gpumarket login --device` wraps the same functions).

Exit codes: 0 signed in, 1 the sign-in or the exchange failed (the reason on stderr), 2 bad usage."""

from __future__ import annotations

import argparse
import json
import sys

from oidc_device.flow import DeviceFlowError, DevicePrompt, device_login, exchange_for_api_token


def _show(prompt: DevicePrompt) -> None:
    where = prompt.verification_uri_complete or prompt.verification_uri
    print(f"Open {where} and confirm the code {prompt.user_code}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oidc_device", description=__doc__.split("\n\n")[0])
    parser.add_argument("--issuer", required=True, help="the identity provider's issuer URL")
    parser.add_argument("--client-id", required=True, help="the command line's client at the provider")
    parser.add_argument("--server", required=True, help="the gpumarket server's URL")
    parser.add_argument("--tenant", help="the team the API token acts in (needed if you are in several)")
    parser.add_argument("--name", default="gpumarket login --device", help="the token's name")
    args = parser.parse_args(argv)
    try:
        tokens = device_login(args.issuer, args.client_id, prompt=_show)
        issued = exchange_for_api_token(args.server, tokens.id_token, tenant=args.tenant, name=args.name)
    except DeviceFlowError as exc:
        field = f" ({exc.field})" if exc.field else ""
        print(f"error: {exc.code}{field}: {exc.detail}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 1
    print(json.dumps(issued))
    return 0


if __name__ == "__main__":
    sys.exit(main())
