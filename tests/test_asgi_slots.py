"""config/slots.py and config/asgi.py: sync requests run with one of the worker's slots; agents' requests that
wait too long for one are answered 503 unrun, people's never are."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from config import slots


def test_kinds_by_path() -> None:
    http = {"type": "http"}
    assert slots.kind_of({**http, "path": "/api/v1/agent/heartbeat"}) == "agent"
    assert slots.kind_of({**http, "path": "/api/v1/agent/commands"}) is None  # holds a slot only to look
    assert slots.kind_of({**http, "path": "/api/v1/tenants/alpha/jobs"}) == "web"
    assert slots.kind_of({"type": "lifespan"}) is None


def test_an_agent_request_that_waits_too_long_is_turned_away_a_person_waits(settings: Any) -> None:
    settings.ASGI_AGENT_SLOTS, settings.ASGI_WEB_SLOTS, settings.ASGI_AGENT_QUEUE_SECONDS = 1, 1, 1

    async def scenario() -> list[str]:
        seen: list[str] = []
        async with slots.held("agent"):
            with pytest.raises(slots.Busy):
                async with slots.held("agent"):
                    pass
            async with slots.held("web"):
                seen.append("web ran beside a busy agent slot")
        async with slots.held("web"):
            waiter = asyncio.create_task(_held_web(seen))
            await asyncio.sleep(1.5)  # past the agents' limit: a person's request still waits
            assert not waiter.done()
        await waiter
        return seen

    assert asyncio.run(scenario()) == ["web ran beside a busy agent slot", "web waited its turn"]


async def _held_web(seen: list[str]) -> None:
    async with slots.held("web"):
        seen.append("web waited its turn")


def test_the_turned_away_answer_is_the_apis_error_shape() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(slots.busy(send))
    assert sent[0]["status"] == 503 and (b"retry-after", b"5") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {
        "error": "unavailable",
        "detail": "The server is busy; retry later.",
    }
