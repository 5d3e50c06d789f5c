"""How many sync requests one ASGI worker runs at once (docs/deploy.md §Web machines).

Under ASGI Django runs each sync request on a thread of its own. Left unbounded, a burst (a fleet's agents
reporting in the same second) starts hundreds of threads that share one interpreter lock and all finish late,
past their clients' timeouts, while the tenants' requests wait among them. So each request first waits in the
event loop for a slot, in arrival order, and runs only with one: ASGI_AGENT_SLOTS for the agent API and
ASGI_WEB_SLOTS for everything else (portal, tenants' API, /metrics, health), so agents' traffic can never take
the slots the people need. The command long poll holds an agent slot only while it checks its credential,
none while it waits, and looks at the outbox with a "look" slot of its own (as many as the agent slots): a
round that binds hundreds of nodes wakes hundreds of polls at once, and their one-query looks must not queue
behind the reports, acknowledgements and starts that follow.

When the agents ask for more than the worker can do, their queue would grow until every request in it is
older than the agent's own timeout (10 s) and the worker spends itself on answers nobody waits for. So an
agent request that has waited ASGI_AGENT_QUEUE_SECONDS for a slot is answered 503 at once, unrun: the agent
backs off (1 s doubling to 60 s) and its reports stay spooled, so the fleet slows down to what the server
does. People's requests are never turned away here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

AGENT_PREFIX = "/api/v1/agent/"
LONG_POLL = "/api/v1/agent/commands"

_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def kind_of(scope: dict[str, Any]) -> str | None:
    """ "agent" or "web" for an HTTP request that runs with a slot; None for the long poll and non-HTTP."""
    if scope["type"] != "http" or scope["path"] == LONG_POLL:
        return None
    return "agent" if scope["path"].startswith(AGENT_PREFIX) else "web"


class Busy(Exception):
    """No agent slot came free within ASGI_AGENT_QUEUE_SECONDS."""


BUSY = {"error": "unavailable", "detail": "The server is busy; retry later."}
BUSY_RETRY_AFTER_S = 5


@contextlib.asynccontextmanager
async def held(kind: str) -> AsyncIterator[None]:
    """Hold one of the worker's `kind` slots; Busy when an agent request waited too long for it."""
    semaphore = slot(kind)
    if kind == "agent":
        try:
            await asyncio.wait_for(semaphore.acquire(), settings.ASGI_AGENT_QUEUE_SECONDS)
        except TimeoutError:
            raise Busy from None
    else:
        await semaphore.acquire()
    try:
        yield
    finally:
        semaphore.release()


def slot(kind: str) -> asyncio.Semaphore:
    """The worker's semaphore for `kind` (per event loop: one per worker process)."""
    loop = asyncio.get_running_loop()
    mine = _slots.get(loop)
    if mine is None:
        mine = _slots[loop] = {
            "agent": asyncio.Semaphore(settings.ASGI_AGENT_SLOTS),
            "web": asyncio.Semaphore(settings.ASGI_WEB_SLOTS),
            "look": asyncio.Semaphore(settings.ASGI_AGENT_SLOTS),
        }
    return mine[kind]


async def busy(send: Any) -> None:
    """The ASGI answer for Busy: 503 in the API's error shape, with Retry-After; the request was not run."""
    headers = [(b"content-type", b"application/json"), (b"retry-after", str(BUSY_RETRY_AFTER_S).encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(BUSY).encode()})
