"""Readiness: the database, the broker, a live worker and a recent round, each named when it fails.

Each check answers (ok, detail) and never raises: a readiness probe that fails with a 500 says nothing about
what is wrong. The checks run in order and stop asking the database once it is unreachable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.logs import redact


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


def _failure(exc: Exception) -> str:
    return redact(f"{type(exc).__name__}: {exc}".strip())[:300]


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return Check(True, connection.vendor)
    except Exception as exc:
        return Check(False, _failure(exc))


def check_broker() -> Check:
    """Redis when REDIS_URL is set; otherwise the local filesystem broker's folder (make run)."""
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()
            return Check(True, "redis")
        except Exception as exc:
            return Check(False, _failure(exc))
    folder = Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]))
    if folder.is_dir() and _writable(folder):
        return Check(True, "filesystem broker (no REDIS_URL)")
    return Check(False, f"filesystem broker folder {folder} is missing or not writable")


def _writable(folder: Path) -> bool:
    import os

    return os.access(folder, os.W_OK)


def worker_stale_after() -> timedelta:
    return timedelta(seconds=3 * settings.WORKER_HEARTBEAT_SECONDS)


def check_worker(now: datetime) -> Check:
    from ops.models import WorkerHeartbeat

    try:
        newest = WorkerHeartbeat.objects.order_by("-seen_at").first()
    except Exception as exc:
        return Check(False, _failure(exc))
    limit = worker_stale_after()
    if newest is None:
        return Check(False, "no Celery worker has ever sent a heartbeat")
    age = now - newest.seen_at
    if age > limit:
        return Check(
            False,
            f"no Celery worker heartbeat for {age.total_seconds():.0f} s (limit {limit.total_seconds():.0f} s)",
        )
    return Check(True, f"{newest.hostname} {age.total_seconds():.0f} s ago")


def check_rounds(now: datetime) -> Check:
    """The newest committed round finished within two periods (plus one beat tick)."""
    from market.models import Round, RoundState
    from market.selectors.policy import market_policy

    try:
        period = market_policy().round_seconds
        last = Round.objects.filter(state=RoundState.DISPATCHED).order_by("-dispatched_at").first()
        failed = Round.objects.filter(state=RoundState.FAILED).order_by("-slot").first()
    except Exception as exc:
        return Check(False, _failure(exc))
    limit = timedelta(seconds=2 * period + settings.ROUND_TICK_SECONDS)
    if last is None or last.dispatched_at is None:
        return Check(False, "no round has committed yet")
    age = now - last.dispatched_at
    if age > limit:
        why = (
            f"; round {failed.pk} failed: {failed.error[:200]}" if failed and failed.slot > last.slot else ""
        )
        return Check(
            False,
            f"last round {last.pk} committed {age.total_seconds():.0f} s ago (limit {limit.total_seconds():.0f} s){why}",
        )
    return Check(True, f"round {last.pk} committed {age.total_seconds():.0f} s ago")


def readiness(now: datetime | None = None) -> dict[str, Check]:
    now = now or timezone.now()
    checks = {"database": check_database(), "broker": check_broker()}
    if not checks["database"].ok:
        down = Check(False, "database unavailable")
        return {**checks, "worker": down, "rounds": down}
    return {**checks, "worker": check_worker(now), "rounds": check_rounds(now)}
