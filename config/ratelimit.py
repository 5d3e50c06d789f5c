"""Atomic fixed-window counters in Redis (docs/reliability.md §Rate limits).

One INCR and one EXPIRE in a MULTI/EXEC pipeline per event: concurrent clients, in any number of processes,
each get a distinct count, so a limit of N lets exactly N through per window. (A read-then-write through
Django's cache lets racing requests read the same count and overshoot.) The counters talk to REDIS_URL
directly, whatever cache backend is configured; without Redis (the local SQLite setup) they fall back to the
cache's add and incr.
"""

from __future__ import annotations

import logging
import time
from functools import cache

import redis
from django.conf import settings
from django.core.cache import cache as django_cache

log = logging.getLogger(__name__)


@cache
def _client(url: str) -> redis.Redis:
    # The pool is given, not made by from_url: two threads' first calls may both get here (an ASGI worker runs
    # a thread per request), and a client made by from_url closes its pool when the losing one is dropped,
    # under the request still using it.
    return redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    )


def _key(name: str, window_s: int, now: float) -> str:
    return f"{settings.RATE_LIMIT_PREFIX}:{name}:{window_s}:{int(now) // window_s}"


def hit(name: str, window_s: int, *, now: float | None = None) -> int:
    """Count one event under `name` in the current window of `window_s` seconds; returns the count so far,
    this event included. Returns 0 (nothing counted) when Redis cannot be reached: a limit is not worth
    failing the request for."""
    key = _key(name, window_s, time.time() if now is None else now)
    if not settings.REDIS_URL:
        django_cache.add(key, 0, window_s)
        return int(django_cache.incr(key))
    try:
        pipe = _client(settings.REDIS_URL).pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, window_s + 1)
        count, _ = pipe.execute()
    except redis.RedisError:
        log.warning("rate limit counter %s not counted: Redis unavailable", name, exc_info=True)
        return 0
    return int(count)


def count(name: str, window_s: int, *, now: float | None = None) -> int:
    """The count under `name` in the current window, without adding to it."""
    key = _key(name, window_s, time.time() if now is None else now)
    if not settings.REDIS_URL:
        return int(django_cache.get(key, 0))
    try:
        value = _client(settings.REDIS_URL).get(key)
    except redis.RedisError:
        return 0
    return int(value or 0)


def clear(name: str, window_s: int, *, now: float | None = None) -> None:
    key = _key(name, window_s, time.time() if now is None else now)
    if not settings.REDIS_URL:
        django_cache.delete(key)
        return
    try:
        _client(settings.REDIS_URL).delete(key)
    except redis.RedisError:
        log.warning("rate limit counter %s not cleared: Redis unavailable", name, exc_info=True)


def seconds_left(window_s: int, *, now: float | None = None) -> int:
    now = time.time() if now is None else now
    return window_s - int(now) % window_s
