"""The net under concurrent writes (issue 38; docs/reliability.md §Concurrency and money).

The lock rules (docs/rounds.md §Lock order) remove the deadlocks we know of; this catches whatever is left.
A request or task that fails with a deadlock (SQLSTATE 40P01) or a serialization failure (40001) lost its
whole transaction, so it is run again, up to DB_CONFLICT_RETRIES times with a growing, jittered pause. It is
the same request, so it carries the same Idempotency-Key, and each service's replay of that key keeps a
repeat from applying anything twice.

One place for every write path: `retrying` is what the view middleware (API, portal, agent endpoints;
config.middleware.DatabaseConflictMiddleware) and the Celery task class (`RetryingTask`) run their work in.

A request is repeated only if nothing it wrote has been committed yet: a view that committed one transaction
and met the conflict in a second would do the first again. Writes are seen through an execute wrapper, and a
write inside a transaction counts once that transaction commits. Writes that are harmless to repeat (a
token's last use) say so with `harmless_writes()`. A task is repeated in any case: tasks are written to be
delivered twice (ARCHITECTURE.md §Rounds and workers).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from celery import Task
from django.conf import settings
from django.db import connection

from config import metrics

log = logging.getLogger("gpumarket.db")

T = TypeVar("T")

CONFLICTS = {"40P01": "deadlock", "40001": "serialization failure"}
WRITES = ("INSERT", "UPDATE", "DELETE")

_active: ContextVar[bool] = ContextVar("db_conflict_net", default=False)
_harmless: ContextVar[bool] = ContextVar("db_harmless_writes", default=False)


class GaveUp(Exception):
    """The conflict came back after every retry, or after part of the request was committed."""

    def __init__(self, sqlstate: str, *, tries: int, committed: bool) -> None:
        super().__init__(f"{CONFLICTS[sqlstate]} (SQLSTATE {sqlstate}) after {tries} tries")
        self.sqlstate, self.tries, self.committed = sqlstate, tries, committed


def conflict_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a deadlock or serialization failure in `exc` or what caused it, else None (Django
    wraps the driver's error, which carries the state)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if state in CONFLICTS:
            return str(state)
        current = current.__cause__ or current.__context__
    return None


def active() -> bool:
    """Whether the current work runs inside the net (it will be retried, so its error must propagate)."""
    return _active.get()


@contextmanager
def harmless_writes() -> Iterator[None]:
    """Writes in this block may be repeated without harm (a last-used time): they do not stop a retry."""
    token = _harmless.set(True)
    try:
        yield
    finally:
        _harmless.reset(token)


class _Writes:
    """An execute wrapper that notes whether a write of this attempt has been committed."""

    def __init__(self) -> None:
        self.committed = False

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not self.committed and not _harmless.get() and sql.lstrip()[:6].upper() in WRITES:
            db = context["connection"]
            if not db.in_atomic_block:
                self.committed = True  # autocommit: it is in
            elif not any(hook is self._commit for _, hook, _ in db.run_on_commit):
                db.on_commit(self._commit)  # dropped with the transaction if it rolls back
        return result

    def _commit(self) -> None:
        self.committed = True


def pause_s(retry: int) -> float:
    """Exponential backoff with full jitter, so the transactions that met do not meet again in step."""
    base = float(settings.DB_CONFLICT_BACKOFF_MS) / 1000
    return random.uniform(base / 2, base) * (1 << retry)  # noqa: S311 - jitter, not a secret


def retrying(work: Callable[[], T], *, where: str, repeatable: bool = False, retries: int | None = None) -> T:
    """work(), run again on a deadlock or serialization failure: at most `retries` (DB_CONFLICT_RETRIES)
    more times, and (unless `repeatable`) only while nothing it wrote has been committed. Raises GaveUp when
    it stops; counted in gpumarket_db_conflicts by `where` (request, task), SQLSTATE and outcome."""
    if _active.get():  # nested (an eager task inside a request): the outer net retries the whole
        return work()
    token = _active.set(True)
    try:
        limit: int = settings.DB_CONFLICT_RETRIES if retries is None else retries
        return _attempts(work, where, repeatable, limit)
    finally:
        _active.reset(token)


def _attempts(work: Callable[[], T], where: str, repeatable: bool, retries: int) -> T:
    state = ""
    for attempt in range(retries + 1):
        writes = _Writes()
        try:
            with connection.execute_wrapper(writes):
                result = work()
        except Exception as exc:
            state = conflict_of(exc) or ""
            if not state:
                raise
            # An enclosing transaction (a test's) is broken by the error: nothing here can be repeated.
            stuck = connection.in_atomic_block or (writes.committed and not repeatable)
            if stuck or attempt == retries:
                metrics.db_conflict(where=where, sqlstate=state, outcome="gave_up")
                log.warning("%s gave up: %s", where, exc, extra={"tries": attempt + 1})
                raise GaveUp(state, tries=attempt + 1, committed=writes.committed) from exc
            metrics.db_conflict(where=where, sqlstate=state, outcome="retried")
            log.info("%s retried after %s", where, CONFLICTS[state], extra={"try": attempt + 1})
            time.sleep(pause_s(attempt))
            continue
        if attempt:
            metrics.db_conflict(where=where, sqlstate=state, outcome="recovered")
        return result
    raise AssertionError("unreachable: the last attempt returns or raises")


class RetryingTask(Task):  # type: ignore[type-arg]  # celery-types' Task is generic
    """Every Celery task's class (config/celery.py): its run goes through the net, and when the net gives
    up the task fails with the database's own error, as before, for Celery's and the next tick's handling."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = super().__call__
        try:
            return retrying(lambda: call(*args, **kwargs), where="task", repeatable=True)
        except GaveUp as gave_up:
            raise gave_up.__cause__ or gave_up from None
