"""The web server's entry point (`gunicorn -c python:config.gunicorn config.asgi`, docs/deploy.md).

Served by ASGI workers, a waiting agent's command poll is a coroutine, not a worker (nodeagent/api/agent.py);
every other view stays sync and runs on a thread of its own per request. Those threads come and go with
their requests, so database connections come from a pool (DB_POOL, on by default here) rather than from
Django's per-thread persistent connections.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DB_POOL", "1")
application = get_asgi_application()
