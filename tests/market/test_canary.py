"""Canaries: a proposed version on a few tenants, guardrails that revert it, expiry (docs/policy.md §Canary)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.models import AuditEvent
from config.errors import PolicyError
from market.models import CanaryState, PolicyCanary, Round, RoundState, VersionKind
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version
from market.services import rounds
from market.services.canary import CanaryConflict, canary_check, canary_promote, canary_revert, canary_start
from market.services.leases import lease_running
from market.services.policy import policy_update
from market.services.policy_proposals import policy_version_propose
from tests.market.round_helpers import make_job


def _proposal(world, **tenants):
    return policy_version_propose(actor=world.admin, snapshot={"tenants": tenants}, reason="try it")


def test_canary_applies_only_to_its_tenants_and_promote_to_everyone(world):
    before = policy_snapshot()
    draft = _proposal(world, alpha={"weight": 7}, beta={"weight": 8, "guarantees": {"H100": 1}})
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], reason="beta first")
    now = policy_snapshot()
    assert now["tenants"]["beta"] == draft.snapshot["tenants"]["beta"]
    assert now["tenants"]["alpha"] == before["tenants"]["alpha"]  # untouched
    assert now["market"] == before["market"]
    assert canary.started == current_version() and canary.started.kind == VersionKind.CANARY_START
    assert canary.base.snapshot == before
    with pytest.raises(CanaryConflict) as err:
        canary_start(actor=world.admin, version=draft, tenants=["alpha"])
    assert "another canary" in str(err.value)  # one at a time

    canary_promote(actor=world.admin, canary_id=canary.pk, reason="looks fine")
    canary.refresh_from_db()
    assert canary.state == CanaryState.PROMOTED
    assert canary.ended is not None and canary.ended.kind == VersionKind.CANARY_PROMOTE
    assert policy_snapshot() == draft.snapshot
    assert AuditEvent.objects.filter(action__in=["canary.start", "canary.promote"]).count() == 2


def test_ending_by_hand_reverts_only_the_canary_part(world):
    before = policy_snapshot()
    draft = _proposal(world, beta={"weight": 8})
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], market=False)
    policy_update(actor=world.admin, price_step_bp=123)  # another change meanwhile stays
    canary_revert(actor=world.admin, canary_id=canary.pk, reason="no")
    after = policy_snapshot()
    assert after["tenants"] == before["tenants"] and after["market"]["price_step_bp"] == 123
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED
    assert canary.ended is not None and canary.ended.kind == VersionKind.CANARY_REVERT
    with pytest.raises(CanaryConflict):
        canary_revert(actor=world.admin, canary_id=canary.pk)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"tenants": ["zeta"]}, "tenants"),
        ({"tenants": "beta"}, "tenants"),
        ({"tenants": []}, "tenants"),
        ({"tenants": ["beta"], "duration_s": 5}, "duration_s"),
        ({"tenants": ["beta"], "on_expiry": "shrug"}, "on_expiry"),
        ({"tenants": ["beta"], "min_compliance_pct": 101}, "min_compliance_pct"),
        ({"tenants": ["beta"], "window_s": 0}, "window_s"),
        ({"tenants": ["beta"], "market": "yes"}, "market"),
    ],
)
def test_start_refuses_bad_input_naming_the_field(world, args, field):
    draft = _proposal(world, beta={"weight": 8})
    with pytest.raises(PolicyError) as err:
        canary_start(actor=world.admin, version=draft, **args)
    assert err.value.field == field
    assert not PolicyCanary.objects.exists()


def test_only_admins(world):
    draft = _proposal(world, beta={"weight": 8})
    with pytest.raises(PermissionDenied):
        canary_start(actor=world.bob, version=draft, tenants=["beta"])


@pytest.fixture
def contested(world):
    """beta holds the whole cluster (16 H100s); alpha then asks for 8 under a canary guaranteeing it 8."""
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta):
        world.fund(tenant, 1000)
    spot = [make_job(world.beta, world.bob, gpus=8, limits={world.h100: 6}, name=f"b{i}") for i in range(2)]
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 2
    for job in spot:
        lease_running(lease_id=job.leases.get().pk)
    return world, r1


def _second_round(world, r1):
    make_job(world.alpha, world.alice, gpus=8, limits={world.h100: 3})
    r2 = rounds.round_tick(now=timezone.now() + timedelta(seconds=r1.period_s))
    assert r2 is not None
    assert r2.state == RoundState.DISPATCHED, r2.error
    return timezone.now() + timedelta(seconds=2 * r1.period_s)


def test_compliance_below_threshold_reverts(contested):
    world, r1 = contested
    before = policy_snapshot()
    draft = _proposal(world, alpha={"guarantees": {"H100": 8}})
    # Leases younger than min_runtime_s are never preempted: alpha gets none of its guarantee.
    canary = canary_start(actor=world.admin, version=draft, tenants=["alpha"], min_compliance_pct=50)
    assert policy_snapshot()["tenants"]["alpha"]["guarantees"] == {"H100": 8}
    now = _second_round(world, r1)
    assert canary_check(now=now) == canary
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED
    assert "compliance of alpha was 0%" in canary.end_reason
    assert canary.last_check["worst_tenant"] == "alpha"
    assert policy_snapshot() == before
    ended = canary.ended
    assert ended is not None
    assert ended.actor is None and ended.parent == canary.base and ended.kind == VersionKind.CANARY_REVERT
    trip = AuditEvent.objects.get(action="canary.trip")
    assert trip.actor is None and "guardrail tripped" in trip.detail["reason"]


def test_preemptions_above_rate_revert(contested):
    world, r1 = contested
    policy_update(actor=world.admin, min_runtime_s=0)
    draft = _proposal(world, alpha={"guarantees": {"H100": 8}})
    canary = canary_start(actor=world.admin, version=draft, tenants=["alpha"], max_preemptions_per_hour=0)
    assert canary_check(now=timezone.now()) is None  # nothing yet
    now = _second_round(world, r1)  # alpha reclaims its guarantee: one of beta's leases is preempted
    assert canary_check(now=now) == canary
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED and "preemptions per hour" in canary.end_reason
    assert policy_snapshot()["tenants"]["alpha"]["guarantees"] == {}


def test_failed_rounds_revert(world):
    draft = _proposal(world, beta={"weight": 8})
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], max_failed_rounds=0)
    Round.objects.create(slot=timezone.now(), period_s=300, state=RoundState.FAILED, error="boom")
    assert canary_check() == canary
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED and "1 rounds failed" in canary.end_reason
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 2


@pytest.mark.parametrize(
    ("on_expiry", "state", "weight"), [("promote", "promoted", 8), ("revert", "reverted", 2)]
)
def test_expiry_promotes_or_reverts_as_chosen(world, on_expiry, state, weight):
    draft = _proposal(world, beta={"weight": 8})
    canary = canary_start(
        actor=world.admin,
        version=draft,
        tenants=["beta"],
        duration_s=600,
        on_expiry=on_expiry,
        max_failed_rounds=0,
    )
    assert canary_check(now=timezone.now() + timedelta(seconds=300)) is None
    assert canary_check(now=timezone.now() + timedelta(seconds=601)) == canary
    canary.refresh_from_db()
    assert canary.state == state and canary.end_reason == "canary time is up"
    assert policy_snapshot()["tenants"]["beta"]["weight"] == weight
    assert AuditEvent.objects.filter(action="canary.expire").count() == 1
    assert canary_check(now=timezone.now() + timedelta(seconds=900)) is None


def test_a_finished_round_judges_the_canary_at_once(world):
    from market.tasks import round_advance

    draft = _proposal(world, beta={"weight": 8})
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], max_failed_rounds=0)
    failed = Round.objects.create(slot=timezone.now(), period_s=300, state=RoundState.FAILED, error="boom")
    assert round_advance(failed.pk) == RoundState.FAILED
    canary.refresh_from_db()
    assert canary.state == CanaryState.REVERTED
