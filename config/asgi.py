"""The web server's entry point (`gunicorn -c python:config.gunicorn config.asgi`, docs/deploy.md).

Served by ASGI workers, a waiting agent's command poll is a coroutine, not a worker (nodeagent/api/agent.py);
every other view stays sync and runs on a thread of its own per request, once it has one of the worker's
slots (config/slots.py). Those threads come and go with their requests, so database connections come from a
pool (DB_POOL, on by default here) rather than from Django's per-thread persistent connections.
"""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DB_POOL", "1")
django_application = get_asgi_application()

from config import metrics, slots  # noqa: E402 - after the settings are configured


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    kind = slots.kind_of(scope)
    if kind is None:
        await django_application(scope, receive, send)
        return
    try:
        async with slots.held(kind):
            await django_application(scope, receive, send)
    except slots.Busy:
        metrics.agent_request_shed()
        await slots.busy(send)
