"""Applying a proposed version applies its own changes, not the whole policy as it stood when it was proposed
(market.selectors.policy_versions.version_target): what changed since, and the proposal did not touch, stays."""

from __future__ import annotations

import copy

from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version, rebased, version_target
from market.services.canary import canary_promote, canary_start
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_apply import policy_revert
from market.services.policy_proposals import policy_version_propose

ON = {
    "market": {"min_runtime_s": 600, "price_step_bp": 500},
    "gpu_types": {"H100": {"reserve_price": 2, "max_price": 20}},
    "tenants": {
        "alpha": {"weight": 1, "guardrail": None, "guarantees": {"H100": 2}, "allowance": None},
        "beta": {"weight": 2, "guardrail": None, "guarantees": {}, "allowance": None},
    },
}


def _with(snapshot, **edits):
    out = copy.deepcopy(snapshot)
    for path, value in edits.items():
        *parents, leaf = path.split("__")
        node = out
        for key in parents:
            node = node[key]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out


def test_rebased_keeps_what_changed_since_and_the_proposal_did_not_touch():
    proposal = _with(
        ON, market__min_runtime_s=300, tenants__beta__weight=9, tenants__alpha__guarantees__H100=None
    )
    now = _with(ON, market__price_step_bp=250, tenants__alpha__weight=4, tenants__beta__guarantees__H100=1)
    out = rebased(proposal, on=ON, now=now)
    assert out["market"] == {"min_runtime_s": 300, "price_step_bp": 250}
    assert out["tenants"]["alpha"] == {"weight": 4, "guardrail": None, "guarantees": {}, "allowance": None}
    assert out["tenants"]["beta"] == {
        "weight": 9,
        "guardrail": None,
        "guarantees": {"H100": 1},
        "allowance": None,
    }
    assert now["tenants"]["alpha"]["guarantees"] == {"H100": 2}  # the inputs are not changed


def test_rebased_of_an_unchanged_proposal_is_the_policy_now():
    now = _with(ON, tenants__beta__weight=5)
    assert rebased(ON, on=ON, now=now) == now


def test_promoting_a_canary_keeps_changes_made_since_the_proposal(world):
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 8}}}, reason="x"
    )
    tenant_policy_update(actor=world.admin, tenant=world.gamma, weight=11)  # after the draft, beside it
    policy_update(actor=world.admin, price_step_bp=123)
    assert version_target(draft)["tenants"]["gamma"]["weight"] == 11
    canary = canary_start(actor=world.admin, version=draft, tenants=["beta"], reason="beta first")
    canary_promote(actor=world.admin, canary_id=canary.pk, reason="fine")
    now = policy_snapshot()
    assert now["tenants"]["beta"]["weight"] == 8
    assert now["tenants"]["gamma"]["weight"] == 11 and now["market"]["price_step_bp"] == 123


def test_applying_a_draft_to_everyone_keeps_changes_made_since(world):
    draft = policy_version_propose(actor=world.admin, snapshot={"market": {"min_runtime_s": 42}}, reason="x")
    tenant_policy_update(actor=world.admin, tenant=world.alpha, weight=6)
    policy_revert(actor=world.admin, version=draft, reason="apply the draft")
    now = policy_snapshot()
    assert now["market"]["min_runtime_s"] == 42 and now["tenants"]["alpha"]["weight"] == 6


def test_reverting_to_an_applied_version_restores_it_whole(world):
    tenant_policy_update(actor=world.admin, tenant=world.alpha, weight=3)
    earlier = current_version()
    assert earlier is not None
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=7)
    policy_revert(actor=world.admin, version=earlier, reason="back")
    assert policy_snapshot() == earlier.snapshot
