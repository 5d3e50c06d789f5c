"""Hot parent rows and deferred foreign keys (issue 38, docs/rounds.md §Lock order, docs/reliability.md
§Concurrency and money), on PostgreSQL with real connections and the real services.

Django creates foreign keys DEFERRABLE INITIALLY DEFERRED, so each child row's key is checked at COMMIT
with `SELECT 1 ... FOR KEY SHARE` on its parent. A transaction that locked a parent with plain
`FOR UPDATE` (which conflicts with KEY SHARE) and also inserted a child of another parent, locked the same
way by a second transaction that inserted a child of the first, waited at COMMIT for the other: PostgreSQL
killed one of them with `deadlock detected`, and the API answered 500. Each test below pauses the two
services after they took their locks and inserted their rows, then lets both commit; with `FOR UPDATE`
one of them failed every time. With `FOR NO KEY UPDATE` the key checks wait for nobody and both finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from accounts import tokens
from accounts.models import ApiToken
from market.models import Guarantee, SpendAlertRule
from market.services import policy as policy_services
from market.services import spend_alerts
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


class _Pauses:
    """Each named service waits at its pause point (a function it calls after its locks and inserts and
    before it commits) until both have reached theirs, so the two commits meet."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, points: dict[str, tuple[Any, str]]) -> None:
        self.barrier = threading.Barrier(len(points), timeout=20)
        for module, attribute in points.values():
            real = getattr(module, attribute)
            monkeypatch.setattr(module, attribute, self._paused(real))

    def _paused(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            self.barrier.wait()
            return result

        return paused


def _together(work: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    outcome: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            outcome[name] = work[name]()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            outcome[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(name,)) for name in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return outcome


def _no_failures(outcome: dict[str, Any]) -> None:
    failed = {name: repr(value) for name, value in outcome.items() if isinstance(value, Exception)}
    assert failed == {}


def test_a_token_and_a_spend_alert_of_one_manager_commit_together(world: World, monkeypatch) -> None:
    """The pair seen in production: token_create locks the user and inserts a token of the tenant;
    spend_alert_create locks the tenant and inserts a rule created by the user."""
    w = world
    _Pauses(monkeypatch, {"token": (tokens, "audit"), "alert": (spend_alerts, "audit")})
    outcome = _together(
        {
            "token": lambda: tokens.token_create(user=w.alice, tenant=w.alpha, name="ci"),
            "alert": lambda: spend_alerts.spend_alert_create(
                actor=w.alice, tenant=w.alpha, kind="spend_day", threshold=5_000_000
            ),
        }
    )
    _no_failures(outcome)
    assert ApiToken.objects.filter(user=w.alice, tenant=w.alpha).count() == 1
    assert SpendAlertRule.objects.filter(tenant=w.alpha).count() == 1


def test_an_admins_token_and_their_tenant_policy_change_commit_together(world: World, monkeypatch) -> None:
    """token_create (the admin's user row locked, a token of the tenant inserted) against the tenant's policy
    change (the tenant's row locked, guarantees and an audit row by the admin inserted)."""
    w = world
    w.nodes(w.h100, 1, size=8)
    _Pauses(monkeypatch, {"token": (tokens, "audit"), "policy": (policy_services, "audit")})
    outcome = _together(
        {
            "token": lambda: tokens.token_create(user=w.admin, tenant=w.alpha, name="ops"),
            "policy": lambda: policy_services.tenant_policy_update(
                actor=w.admin, tenant=w.alpha, weight=3, guarantees={"H100": 2}
            ),
        }
    )
    _no_failures(outcome)
    w.alpha.refresh_from_db()
    assert w.alpha.weight == 3
    assert Guarantee.objects.get(tenant=w.alpha).gpus == 2
    assert ApiToken.objects.filter(user=w.admin, tenant=w.alpha).count() == 1
