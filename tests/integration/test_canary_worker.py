"""A real Celery worker judges a canary's guardrails and reverts it (docs/policy.md §Canary): the beat's
`market.canary_check` sent over Redis to a worker process on its own queue, against the test database."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from accounts.models import AuditEvent
from market.models import CanaryState, PolicyCanary, Round, RoundState
from market.selectors.policy_snapshot import policy_snapshot
from market.services.canary import canary_start
from market.services.policy_proposals import policy_version_propose

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_reverts_a_canary_when_a_round_fails(world, worker_queue):
    from market.tasks import canary_check

    before = policy_snapshot()
    draft = policy_version_propose(actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}})
    canary = canary_start(
        actor=world.admin, version=draft, tenants=["beta"], max_failed_rounds=0, reason="try"
    )
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 9

    Round.objects.create(slot=timezone.now(), period_s=300, state=RoundState.FAILED, error="boom")
    canary_check.apply_async(queue=worker_queue)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        canary.refresh_from_db()
        if canary.state != CanaryState.RUNNING:
            break
        time.sleep(0.25)
    assert canary.state == CanaryState.REVERTED, "the worker did not revert the canary in 90 s"
    assert canary.end_reason == "guardrail tripped: 1 rounds failed, more than 0"
    assert policy_snapshot() == before
    assert canary.last_check["failed_rounds"] == 1
    trip = AuditEvent.objects.get(action="canary.trip")
    assert trip.actor is None and trip.detail["canary"] == canary.pk
    assert PolicyCanary.objects.filter(state=CanaryState.RUNNING).count() == 0
