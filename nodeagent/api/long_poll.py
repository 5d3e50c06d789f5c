"""How a command poll waits without holding a worker or a thread (docs/agent.md §Protocol, docs/deploy.md).

Served by an ASGI worker, a waiting poll is a coroutine parked in the event loop: it holds no worker and no
database connection while it waits (only the idle thread Django keeps for each request's middleware), so one
process keeps thousands of agents waiting beside the rest of the API. What wakes it:

- with Redis: a message on the node's channel (market.services.command_wake publishes one after the commit of
  every transaction that writes a command for the node). The poll subscribes first, then looks, then waits,
  so a command committed between its look and its wait still wakes it. It also looks again every RECHECK_S
  whatever happens: a message lost while Redis restarts costs a few seconds, never the command.
- without Redis (`make run`): it looks every FALLBACK_STEP_S, sleeping in the event loop in between.

One subscriber connection per event loop (so per web process) carries every node's channel, however many
polls wait; it is opened by the first waiting poll and closed when the last one leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio
from django.conf import settings

from config import metrics

log = logging.getLogger(__name__)

# With Redis: look again this often even without a message (a publish may be lost). A lost subscription
# already makes every waiting poll look again (_Hub._read), so this only covers a publish lost on its own.
# 120 s rather than 5 since polls wait up to 240 s (protocol 2): every look is a query in the look lane, and
# at 5 s 1,000 waiting agents cost 200 look-ups a second, at 30 s still 33, as many as their reports.
RECHECK_S = 120.0
FALLBACK_STEP_S = 0.5  # without Redis, or while it cannot be reached: look this often
SUBSCRIBE_TIMEOUT_S = 2.0

T = TypeVar("T")


async def wait_for(*, channel: str, deadline: float, look: Callable[[], Awaitable[list[T]]]) -> list[T]:
    """`look()`'s first non-empty answer, or its empty one at `deadline` (the loop's clock)."""
    loop = asyncio.get_running_loop()
    with metrics.agent_poll_waiting():
        hub = _hub(loop)
        event = None
        if hub is not None:
            try:
                event = await hub.join(channel)
            except (redis.RedisError, OSError, TimeoutError) as exc:
                log.warning(
                    "command poll: Redis unavailable (%s); looking every %.1f s", exc, FALLBACK_STEP_S
                )
        try:
            return await _wait(loop, event, deadline, look)
        finally:
            if hub is not None and event is not None:
                await hub.leave(channel, event)


async def _wait(
    loop: asyncio.AbstractEventLoop,
    event: asyncio.Event | None,
    deadline: float,
    look: Callable[[], Awaitable[list[T]]],
) -> list[T]:
    step = RECHECK_S if event is not None else FALLBACK_STEP_S
    while True:
        if event is not None:
            event.clear()  # before the look: a message that comes during it makes the wait below return
        found = await look()
        remaining = deadline - loop.time()
        if found or remaining <= 0:
            return found
        if event is None:
            await asyncio.sleep(min(step, remaining))
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), min(step, remaining))


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()


def _hub(loop: asyncio.AbstractEventLoop) -> _Hub | None:
    if not settings.REDIS_URL:
        return None
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = _Hub(settings.REDIS_URL)
    return hub


class _Hub:
    """One Redis pub/sub connection shared by the polls waiting in one event loop: a channel is subscribed
    while at least one poll waits on it, and each message sets the events of the polls waiting there."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: Any = None
        self.pubsub: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.members: dict[bytes, set[asyncio.Event]] = {}
        self.ready: dict[bytes, asyncio.Future[None]] = {}
        self.lock = asyncio.Lock()

    async def join(self, channel: str) -> asyncio.Event:
        """An event set whenever a message comes on `channel`, once Redis has confirmed the subscription."""
        key, event = channel.encode(), asyncio.Event()
        self.members.setdefault(key, set()).add(event)
        made: asyncio.Future[None] | None = None
        try:
            if key not in self.ready:
                made = self.ready[key] = asyncio.get_running_loop().create_future()
                async with self.lock:
                    await self._connected().subscribe(key)
                    if self.reader is None:
                        self.reader = asyncio.create_task(self._read(self.pubsub))
            await asyncio.wait_for(asyncio.shield(self.ready[key]), SUBSCRIBE_TIMEOUT_S)
        except BaseException as exc:
            if made is not None and not made.done():
                made.set_exception(redis.ConnectionError(f"subscribe failed: {exc!r}"))
                made.exception()  # retrieved: no "never retrieved" warning when nobody else waits on it
            await self.leave(channel, event)
            raise
        return event

    async def leave(self, channel: str, event: asyncio.Event) -> None:
        key = channel.encode()
        members = self.members.get(key)
        if members is None:
            return
        members.discard(event)
        if members:
            return
        del self.members[key]
        self.ready.pop(key, None)
        # The lock keeps this from racing a join's SUBSCRIBE or another leave's close on the one connection.
        async with self.lock:
            if key in self.members:  # joined again meanwhile: that join subscribed
                return
            if not self.members:
                await self._close()
                return
            # On an error the connection is being re-made: it subscribes again only to the channels still
            # wanted.
            with contextlib.suppress(redis.RedisError, OSError):
                await self.pubsub.unsubscribe(key)

    def _connected(self) -> Any:
        if self.pubsub is None:
            self.client = redis.asyncio.Redis.from_url(
                self.url, socket_connect_timeout=SUBSCRIBE_TIMEOUT_S, socket_keepalive=True
            )
            self.pubsub = self.client.pubsub()
        return self.pubsub

    async def _close(self) -> None:
        client, pubsub, reader = self.client, self.pubsub, self.reader
        self.client = self.pubsub = self.reader = None
        if reader is not None:
            reader.cancel()
        # Closing a connection that may already have broken (that is often why it is closed): nothing to undo.
        with contextlib.suppress(redis.RedisError, OSError):
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()

    async def _read(self, pubsub: Any) -> None:
        healthy = True
        while True:
            try:
                message = await pubsub.get_message(timeout=None)
            except (redis.RedisError, OSError) as exc:
                if healthy:  # a message may have been lost: every waiting poll looks once more
                    log.warning("command poll: Redis subscription lost (%s); reconnecting", exc)
                    for events in self.members.values():
                        for event in events:
                            event.set()
                healthy = False
                await asyncio.sleep(1.0)
                continue
            healthy = True
            if message is None:
                continue
            key = message["channel"]
            if message["type"] == "subscribe":
                ready = self.ready.get(key)
                if ready is not None and not ready.done():
                    ready.set_result(None)
            elif message["type"] == "message":
                for event in self.members.get(key, ()):
                    event.set()
