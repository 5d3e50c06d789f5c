"""The Redis cache backend, with one client object per connection pool.

Django's RedisCacheClient builds a new `redis.Redis` for every cache call, and building one copies some 170
response callbacks: about as much work as the GET it serves (a third of a millisecond, each of a job submit's
cached reads). A `redis.Redis` is safe to share between threads (it takes a connection from its pool per
command), so one per pool does the same work for less.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient
from redis import Redis


class _SharedClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Redis:
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]  # private in Django; the stubs leave it out
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)  # type: ignore[attr-defined]  # Django's private client class; the stubs leave it out
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = _SharedClient
