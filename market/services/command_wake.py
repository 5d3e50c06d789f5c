"""Wake the agents' long polls when commands for their nodes are written (docs/agent.md §Protocol).

Every writer of outbox commands (the round commit, a stop request, the heartbeat's release of a settled lease)
calls `commands_written` inside its transaction; once the transaction commits, one Redis PUBLISH per node goes
to that node's channel, where the node's waiting poll (nodeagent.api.long_poll) is subscribed. A message only
says "look again": the poll reads the rows itself, so a message that is lost, late or repeated costs at most
a delay (the poll re-checks on its own every few seconds) or a look that finds nothing. Without Redis (REDIS_URL
empty: `make run`) nothing is published and the polls re-check the database on a short period instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cache

import redis
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def channel(node_id: int) -> str:
    """The node's channel. Pub/sub ignores Redis's database number, so the database's name keeps two
    deployments (or two test runs) that share one Redis from waking each other's polls."""
    return f"gpumarket:{settings.DATABASES['default']['NAME']}:commands:{node_id}"


@cache
def _client(url: str) -> redis.Redis:
    # A given pool, as config/ratelimit.py explains: a racing duplicate must not close it when dropped.
    return redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    )


def commands_written(*, node_ids: Iterable[int]) -> None:
    """Call where command rows for these nodes are written: their polls are woken after the commit."""
    ids = sorted(set(node_ids))
    if ids and settings.REDIS_URL:
        channels = [channel(n) for n in ids]
        transaction.on_commit(lambda: _publish(channels))


def _publish(channels: list[str]) -> None:
    try:
        pipe = _client(settings.REDIS_URL).pipeline(transaction=False)
        for name in channels:
            pipe.publish(name, b"1")
        pipe.execute()
    except redis.RedisError:  # the rows are committed; the polls' own re-check finds them
        log.warning(
            "could not wake %d node(s)' command polls: Redis unavailable", len(channels), exc_info=True
        )
