"""Protocol 2's command poll, on a thread of its own (docs/agent.md §Protocol 2).

The server holds a poll up to its poll_seconds (240 by default): far longer than the agent may leave its
loop (a sample every 10 s, a report every 10-33 s). So the poll waits here, and the loop goes on: commands
found are handed over through `inbox`, the loop is woken through its wake pipe, and the next poll starts
only once the loop has applied them (its `after` is then the last command handled). Each wait is drawn
from 75-100% of poll_seconds, so agents started together do not renew their polls in step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import threading
from collections.abc import Callable
from typing import Any

from nodeagent.agent.client import Backoff, Client, Rejected, Unavailable

log = logging.getLogger("gpumarket.agent")
REFUSED_PAUSE_S = 60.0


class Poller(threading.Thread):
    def __init__(
        self, *, client: Client, after: Callable[[], int], poll_seconds: Callable[[], float], wake_fd: int
    ) -> None:
        super().__init__(name="command-poll", daemon=True)  # a poll in flight must not keep a stop waiting
        self.client, self.after, self.poll_seconds, self.wake_fd = client, after, poll_seconds, wake_fd
        self.inbox: queue.SimpleQueue[list[dict[str, Any]]] = queue.SimpleQueue()
        self.handled = threading.Event()
        self.stopping = threading.Event()
        self.backoff = Backoff()

    def run(self) -> None:
        while not self.stopping.is_set():
            wait = int(self.poll_seconds() * random.uniform(0.75, 1.0))
            try:
                answer = self.client.call("GET", f"commands?after={self.after()}&wait={wait}", wait=wait)
            except Unavailable as exc:
                delay = self.backoff.next_delay()
                log.warning("command poll: %s; again in %.1f s", exc, delay)
                self.stopping.wait(delay)
                continue
            except Rejected as exc:
                log.error("command poll refused: %s; again in %.0f s", exc, REFUSED_PAUSE_S)
                self.stopping.wait(REFUSED_PAUSE_S)
                continue
            except Exception:  # an answer it cannot use: as an outage, never a dead thread
                log.exception("command poll failed")
                self.stopping.wait(self.backoff.next_delay())
                continue
            self.backoff.reset()
            commands = answer.get("commands") or []
            if not commands:
                continue
            self.handled.clear()
            self.inbox.put(commands)
            self._wake()
            while not self.handled.wait(1.0):  # the loop applies them, then the next poll starts after them
                if self.stopping.is_set():
                    return

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # the pipe is full (BlockingIOError): the loop is awake anyway
            os.write(self.wake_fd, b"c")

    def take(self) -> list[dict[str, Any]]:
        """Every command handed over since the last call (the loop's side)."""
        found: list[dict[str, Any]] = []
        while True:
            try:
                found += self.inbox.get_nowait()
            except queue.Empty:
                return found
