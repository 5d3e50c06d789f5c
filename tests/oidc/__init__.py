"""The OpenID providers the sign-in tests use.

`OidcProvider`: node-oidc-provider (OpenID Certified), installed from tests/oidc/package-lock.json with `npm ci`
when node_modules is missing, started on loopback on a free port. `TestKeyIssuer`: a discovery document and a
JWKS served from this process for a key the test holds, so the refusal tests can sign tokens with any claims
(wrong audience, expired, another issuer); the sign-in flow itself always runs against node-oidc-provider.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import RSAKey

HERE = Path(__file__).resolve().parent
WEB_CLIENT = "gpumarket-web"
WEB_SECRET = "web-client-secret-for-tests-only"
CLI_CLIENT = "gpumarket-cli"


def ensure_node_modules() -> None:
    """`npm ci` from package-lock.json when node_modules is missing; a lock file keeps parallel test workers
    from installing into the same folder at once."""
    installed = HERE / "node_modules" / "oidc-provider" / "package.json"
    if installed.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the sign-in tests need Node.js and npm (apt-get install nodejs npm)")
    with open(HERE / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.exists():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True, timeout=600)


@dataclass
class OidcProvider:
    issuer: str
    users_path: Path
    process: subprocess.Popen[str]
    users: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set_user(self, sub: str, **claims: Any) -> None:
        """The claims the provider gives `sub` from the next sign-in on (it reads the file every time)."""
        self.users[sub] = claims
        self.users_path.write_text(json.dumps(self.users))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_provider(tmp: Path, *, redirect_uris: list[str]) -> OidcProvider:
    ensure_node_modules()
    users = tmp / "oidc-users.json"
    users.write_text("{}")
    clients = [
        {
            "client_id": WEB_CLIENT,
            "client_secret": WEB_SECRET,
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
        },
        {
            "client_id": CLI_CLIENT,
            "token_endpoint_auth_method": "none",
            "grant_types": ["urn:ietf:params:oauth:grant-type:device_code"],
            "response_types": [],
            "redirect_uris": [],
        },
    ]
    config = tmp / "oidc-provider.json"
    config.write_text(json.dumps({"clients": clients, "users": str(users)}))
    process = subprocess.Popen(
        ["node", str(HERE / "provider.mjs"), str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=HERE,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("ready "):
            return OidcProvider(issuer=line.split()[1], users_path=users, process=process)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("node-oidc-provider did not start (run `node tests/oidc/provider.mjs` to see why)")


class TestKeyIssuer:
    """An issuer whose signing key the test holds: /.well-known/openid-configuration and /jwks."""

    __test__ = False  # not a test class, whatever its name says

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "alg": "RS256", "use": "sig"})
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                docs = {"/.well-known/openid-configuration": outer.discovery(), "/jwks": outer.jwks()}
                body = json.dumps(docs.get(self.path, {})).encode()
                self.send_response(200 if self.path in docs else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/auth",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.key.as_dict(private=False)]}

    def sign(self, claims: dict[str, Any], *, key: RSAKey | None = None, alg: str = "RS256") -> str:
        header = {"alg": alg, "kid": "test-key"}
        return jwt.encode(header, claims, key or self.key)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
