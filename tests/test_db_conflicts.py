"""The net under concurrent writes (config/dbretry.py, issue 38), with real deadlocks on PostgreSQL.

A request creates a spend alert (the tenant's row locked, a rule by the manager inserted) and is paused
before it commits. Meanwhile a second connection locks the manager's user row with a plain FOR UPDATE and
then asks for the tenant's: when the request commits, its key check waits for the user row, and the two wait
for each other. The second connection's deadlock_timeout is longer, so PostgreSQL picks the request as the
victim. The net must retry it (and the retry succeed once the other transaction is gone), or, with no
retries left, answer 503 with Retry-After saying nothing happened, and leave nothing written.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections
from django.test import AsyncClient, Client
from prometheus_client import REGISTRY

from accounts.models import AuditEvent
from accounts.tokens import token_create
from config.celery import app
from config.dbretry import RetryingTask
from market.models import SpendAlertRule
from market.services import spend_alerts
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/tenants/alpha/spend-alerts"
PAGE = "/t/alpha/alerts/"
BODY = {"kind": "spend_day", "threshold": "5"}


def _conflicts(where: str, outcome: str) -> float:
    labels = {"where": where, "sqlstate": "40P01", "outcome": outcome}
    return REGISTRY.get_sample_value("gpumarket_db_conflicts_total", labels) or 0.0


def _waits_on_lock(pid: int) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


class _Deadlock:
    """Makes the first spend_alert_create to reach its audit row the victim of a real deadlock."""

    def __init__(self, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
        self.world = world
        self.inserted, self.go = threading.Event(), threading.Event()
        self.other: dict[str, Any] = {}
        real, calls = getattr(spend_alerts, "audit"), []  # noqa: B009 - not re-exported

        def paused(**kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                self.inserted.set()
                assert self.go.wait(20)
            return real(**kwargs)

        monkeypatch.setattr(spend_alerts, "audit", paused)

    def _other_side(self) -> None:
        """Locks the user row, then waits for the tenant's: the cycle closes when the request commits."""
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.other["pid"] = cursor.fetchone()[0]
                cursor.execute("BEGIN")
                cursor.execute("SET LOCAL deadlock_timeout = '10s'")  # the request's backend finds it first
                w = self.world
                cursor.execute("SELECT 1 FROM accounts_user WHERE id = %s FOR UPDATE", [w.alice.pk])
                cursor.execute("SELECT 1 FROM accounts_tenant WHERE id = %s FOR UPDATE", [w.alpha.pk])
                time.sleep(0.3)  # the retry waits for this transaction: it must not meet it again
                cursor.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.other["error"] = exc
        finally:
            connection.close()

    def run(self, send: Callable[[], Any]) -> Any:
        result: dict[str, Any] = {}

        def request() -> None:
            try:
                result["response"] = send()
            finally:
                connection.close()

        sender = threading.Thread(target=request)
        sender.start()
        assert self.inserted.wait(20), "the request never reached its insert"
        other = threading.Thread(target=self._other_side)
        other.start()
        deadline = time.monotonic() + 20
        while not ("pid" in self.other and _waits_on_lock(self.other["pid"])):
            assert time.monotonic() < deadline and "error" not in self.other, self.other
            time.sleep(0.02)
        self.go.set()
        sender.join(60)
        other.join(60)
        assert "error" not in self.other, self.other
        return result["response"]


def test_a_deadlocked_request_is_retried_and_applied_once(world: World, monkeypatch) -> None:
    client = world.client(world.alice)
    retried, recovered = _conflicts("request", "retried"), _conflicts("request", "recovered")
    response = _Deadlock(world, monkeypatch).run(
        lambda: client.post(URL, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    )
    assert response.status_code == 201, response.content
    assert SpendAlertRule.objects.filter(tenant=world.alpha).count() == 1
    assert AuditEvent.objects.filter(action="spend_alert.create").count() == 1
    assert _conflicts("request", "retried") == retried + 1
    assert _conflicts("request", "recovered") == recovered + 1
    # The same key again is the same rule: the retry ran inside it.
    again = client.post(URL, BODY, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.json()["id"] == response.json()["id"]
    assert SpendAlertRule.objects.filter(tenant=world.alpha).count() == 1


def test_under_asgi_too(world: World, monkeypatch) -> None:
    """Through Django's ASGI handler, as the shipped server runs it: the middleware's process_view and the
    view run on the request's thread, so the net sees that thread's connection."""
    secret = token_create(user=world.alice, tenant=world.alpha, name="asgi").secret
    headers = {"Authorization": f"Bearer {secret}"}
    post = AsyncClient().post(URL, BODY, content_type="application/json", headers=headers)
    recovered = _conflicts("request", "recovered")
    response = _Deadlock(world, monkeypatch).run(lambda: asyncio.run(post))
    assert response.status_code == 201, response.content
    assert SpendAlertRule.objects.filter(tenant=world.alpha).count() == 1
    assert _conflicts("request", "recovered") == recovered + 1
    # The handler's thread kept its connection (CONN_MAX_AGE) and is gone: end that session, or the test
    # database could not be dropped at the end of the run.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'idle'"
        )


def test_a_deadlocked_portal_form_is_retried_and_applied_once(world: World, monkeypatch) -> None:
    client = Client()
    client.force_login(world.alice)
    response = _Deadlock(world, monkeypatch).run(lambda: client.post(PAGE, BODY))
    assert response.status_code == 302, response.content[:500]
    assert SpendAlertRule.objects.filter(tenant=world.alpha).count() == 1


def _api(world: World) -> Callable[[], Any]:
    client = world.client(world.alice)
    return lambda: client.post(URL, BODY, format="json")


def _portal(world: World) -> Callable[[], Any]:
    client = Client()
    client.force_login(world.alice)
    return lambda: client.post(PAGE, BODY)


@pytest.mark.parametrize("door", [_api, _portal], ids=["api", "portal"])
def test_when_the_retries_are_spent_the_answer_is_a_503_and_nothing_happened(
    world: World, monkeypatch, settings, door
) -> None:
    settings.DB_CONFLICT_RETRIES = 0
    gave_up = _conflicts("request", "gave_up")
    response = _Deadlock(world, monkeypatch).run(door(world))
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    text = response.json()["detail"] if door is _api else response.content.decode()
    assert "did not happen" in text and "nothing of it was saved" in text
    if door is _api:
        assert response.json()["error"] == "database_conflict"
    assert SpendAlertRule.objects.count() == 0
    assert AuditEvent.objects.filter(action="spend_alert.create").count() == 0
    assert _conflicts("request", "gave_up") == gave_up + 1


def test_every_celery_task_runs_in_the_net(world: World, monkeypatch) -> None:
    assert all(
        isinstance(task, RetryingTask) for name, task in app.tasks.items() if not name.startswith("celery.")
    )

    @app.task(name="tests.create_alert", shared=False)
    def create_alert() -> int:
        return spend_alerts.spend_alert_create(
            actor=world.alice, tenant=world.alpha, kind="spend_day", threshold=5_000_000
        ).rule.pk

    retried = _conflicts("task", "retried")
    result = _Deadlock(world, monkeypatch).run(lambda: create_alert.apply())
    assert result.successful(), result.traceback
    assert SpendAlertRule.objects.filter(pk=result.result).exists()
    assert _conflicts("task", "retried") == retried + 1
