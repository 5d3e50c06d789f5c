"""Spend for the spend-alert tests, and a local HTTP server that receives webhooks and checks signatures."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from accounts.models import Tenant

_keys = itertools.count(1)


def spend(tenant: Tenant, credits: float) -> None:
    """Charge `tenant` this much now, as a lease's settlement does: a hold, then settle it in full."""
    from market.services.ledger import ledger_settle
    from market.services.ledger_bulk import ledger_hold

    n = next(_keys)
    amount = round(credits * 1_000_000)
    hold_key = f"round:{90_000 + n}:job:{tenant.pk}"
    ledger_hold(tenant=tenant, amount=amount, key=hold_key)
    ledger_settle(hold_key=hold_key, charge=amount, key=f"lease:{90_000 + n}:settle")


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]


@dataclass
class Receiver:
    """What the server got, and the statuses it answers with in turn (the last one repeats)."""

    url: str
    statuses: list[int]
    received: list[Received] = field(default_factory=list)

    def signature_ok(self, secret: str, got: Received) -> bool:
        timestamp = got.headers["X-Gpumarket-Timestamp"]
        want = hmac.new(secret.encode(), f"{timestamp}.".encode() + got.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(got.headers["X-Gpumarket-Signature"], f"sha256={want}")

    def json(self, i: int) -> Any:
        return json.loads(self.received[i].body)


@contextmanager
def webhook_receiver(statuses: list[int]) -> Iterator[Receiver]:
    """A real HTTP server on 127.0.0.1 in a thread, for the length of the block."""
    receiver = Receiver(url="", statuses=list(statuses))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.received.append(Received(body, dict(self.headers.items())))
            n = len(receiver.received) - 1
            code = receiver.statuses[min(n, len(receiver.statuses) - 1)]
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/gpumarket"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
