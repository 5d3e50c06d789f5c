"""/healthz and /readyz: each failing part is named, and not ready is 503."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from market.models import Round, RoundState
from ops.services import heartbeat_record

pytestmark = pytest.mark.django_db


def readyz() -> tuple[int, dict[str, Any]]:
    response = Client().get("/readyz")
    return response.status_code, response.json()


def test_healthz_answers_without_asking_anything() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def _round(age_s: float) -> Round:
    now = timezone.now()
    return Round.objects.create(
        slot=now - timedelta(seconds=age_s + 1),
        period_s=300,
        state=RoundState.DISPATCHED,
        dispatched_at=now - timedelta(seconds=age_s),
    )


def test_ready_with_a_live_worker_and_a_recent_round(settings) -> None:
    heartbeat_record(hostname="celery@w1")
    _round(5)
    status, body = readyz()
    assert status == 200, body
    assert body["status"] == "ready" and body["failing"] == []
    assert set(body["checks"]) == {"database", "broker", "worker", "rounds"}


def test_a_stopped_worker_is_named(settings) -> None:
    settings.WORKER_HEARTBEAT_SECONDS = 10
    heartbeat_record(hostname="celery@w1", now=timezone.now() - timedelta(seconds=31))
    _round(5)
    status, body = readyz()
    assert status == 503
    assert body["failing"] == ["worker"]
    assert "no Celery worker heartbeat for 31 s (limit 30 s)" in body["checks"]["worker"]["detail"]


def test_no_worker_ever_and_no_round_yet() -> None:
    status, body = readyz()
    assert status == 503
    assert body["failing"] == ["worker", "rounds"]
    assert body["checks"]["rounds"]["detail"] == "no round has committed yet"


def test_a_stale_round_is_named_with_the_failure_after_it(settings) -> None:
    settings.ROUND_TICK_SECONDS = 10
    heartbeat_record(hostname="celery@w1")
    from market.selectors.policy import market_policy

    policy = market_policy()
    policy.round_seconds = 60
    policy.save()
    old = _round(200)
    Round.objects.create(
        slot=old.slot + timedelta(seconds=60), period_s=60, state=RoundState.FAILED, error="BookError: x"
    )
    status, body = readyz()
    assert status == 503 and body["failing"] == ["rounds"]
    detail = body["checks"]["rounds"]["detail"]
    assert "committed 200 s ago (limit 130 s)" in detail and "failed: BookError: x" in detail


def test_redis_down_is_named(settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    heartbeat_record(hostname="celery@w1")
    _round(1)
    status, body = readyz()
    assert status == 503 and body["failing"] == ["broker"]
    assert "ConnectionError" in body["checks"]["broker"]["detail"]


def test_without_redis_the_filesystem_broker_is_checked(settings, tmp_path) -> None:
    settings.REDIS_URL = None
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    heartbeat_record(hostname="celery@w1")
    _round(1)
    status, body = readyz()
    assert status == 200, body
    assert body["checks"]["broker"]["detail"].startswith("filesystem broker")
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "gone")}
    assert readyz()[0] == 503


def test_the_heartbeat_task_records_its_worker() -> None:
    from ops.models import WorkerHeartbeat
    from ops.tasks import worker_heartbeat

    worker_heartbeat.apply()
    assert WorkerHeartbeat.objects.count() == 1
