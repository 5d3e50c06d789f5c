"""The policy as one plain value (market.selectors.policy_snapshot): every knob, JSON as it stands."""

from __future__ import annotations

import json

from market.models.policy import POLICY_LIMITS
from market.selectors.policy_snapshot import policy_snapshot
from market.services.allowance import allowance_set
from market.services.policy import policy_update, tenant_policy_update


def test_snapshot_holds_every_knob_and_reads_back_changes(world):
    before = policy_snapshot()
    assert set(before["market"]) == set(POLICY_LIMITS)
    assert before["gpu_types"]["H100"] == {"reserve_price": 2_000_000, "max_price": 20_000_000}
    assert before["tenants"]["beta"] == {"weight": 2, "guardrail": None, "guarantees": {}, "allowance": None}

    policy_update(actor=world.admin, min_runtime_s=900)
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=5, guarantees={"A100": 2, "H100": 1})
    allowance_set(actor=world.admin, tenant=world.beta, amount=10, period="week", cap=100)
    after = policy_snapshot()

    assert after["market"]["min_runtime_s"] == 900
    assert after["tenants"]["beta"] == {
        "weight": 5,
        "guardrail": None,
        "guarantees": {"A100": 2, "H100": 1},
        "allowance": {"amount": 10, "period": "week", "cap": 100, "active": True},
    }
    assert after["tenants"]["alpha"] == before["tenants"]["alpha"]
    # Stored as JSON and read back, it is the same value.
    assert json.loads(json.dumps(after)) == after


def test_inactive_tenants_are_not_in_the_snapshot(world):
    world.gamma.active = False
    world.gamma.save()
    assert set(policy_snapshot()["tenants"]) == {"alpha", "beta"}
