"""Revert to a version and proposed versions (docs/policy.md §Versions)."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from accounts.models import Tenant
from config.errors import PolicyError
from market.models import PolicyVersion, VersionKind, VersionStatus
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version, snapshot_diff
from market.services.allowance import allowance_set
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_apply import policy_revert
from market.services.policy_proposals import policy_version_propose


def _v(world):
    policy_update(actor=world.admin, min_runtime_s=900, reason="a")
    tenant_policy_update(
        actor=world.admin, tenant=world.beta, weight=4, guardrail=5_000_000, guarantees={"H100": 2}
    )
    allowance_set(actor=world.admin, tenant=world.alpha, amount=10, period="week", cap=100)
    version = current_version()
    assert version is not None
    return version


def test_diff_lists_each_changed_field_with_both_sides(world):
    old = policy_snapshot()
    policy_update(actor=world.admin, price_step_bp=250)
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=5, guarantees={"H100": 1})
    allowance_set(actor=world.admin, tenant=world.alpha, amount=10, period="week", cap=100)
    changes = snapshot_diff(old, policy_snapshot())
    assert [tuple(c) for c in changes] == [
        ("market.price_step_bp", 500, 250),
        ("tenants.alpha.allowance.active", None, True),
        ("tenants.alpha.allowance.amount", None, 10),
        ("tenants.alpha.allowance.cap", None, 100),
        ("tenants.alpha.allowance.period", None, "week"),
        ("tenants.beta.guarantees.H100", None, 1),
        ("tenants.beta.weight", 2, 5),
    ]
    assert snapshot_diff(old, old) == []


def test_revert_round_trip_restores_the_snapshot(world):
    target = _v(world)
    policy_update(actor=world.admin, min_runtime_s=100, price_step_bp=42)
    tenant_policy_update(
        actor=world.admin, tenant=world.beta, weight=9, guardrail=None, guarantees={"H100": 0, "A100": 3}
    )
    tenant_policy_update(actor=world.admin, tenant=world.alpha, guarantees={"H100": 1})
    gpu_type_policy_save(name="H100", memory_gb=80, reserve_price=1, max_price=2, actor=world.admin)
    allowance_set(actor=world.admin, tenant=world.alpha, amount=50, period="day", cap=500)

    result = policy_revert(actor=world.admin, version=target, reason="back to a")
    assert result.changed and not result.replayed
    assert policy_snapshot() == target.snapshot
    made = current_version()
    assert made == result.version and made is not None
    assert (made.kind, made.parent, made.reason, made.actor) == (
        VersionKind.REVERT,
        target,
        "back to a",
        world.admin,
    )
    assert made.snapshot == target.snapshot


def test_revert_of_no_allowance_deactivates_it(world):
    policy_update(actor=world.admin, min_runtime_s=900)
    target = current_version()
    assert target is not None
    allowance_set(actor=world.admin, tenant=world.alpha, amount=10, period="week", cap=100)
    policy_revert(actor=world.admin, version=target)
    assert policy_snapshot()["tenants"]["alpha"]["allowance"] == {
        "amount": 10,
        "period": "week",
        "cap": 100,
        "active": False,
    }


def test_revert_skips_a_vanished_tenant_and_gpu_type(world):
    target = _v(world)
    tenant_policy_update(actor=world.admin, tenant=world.alpha, weight=7)
    world.beta.active = False
    world.beta.save()
    result = policy_revert(actor=world.admin, version=target, reason="r")
    assert result.skipped_tenants == ["beta"]
    assert policy_snapshot()["tenants"]["alpha"] == target.snapshot["tenants"]["alpha"]
    assert result.version is not None and result.version.detail["skipped_tenants"] == ["beta"]


def test_revert_is_idempotent_on_retry(world):
    target = _v(world)
    policy_update(actor=world.admin, min_runtime_s=100)
    first = policy_revert(actor=world.admin, version=target, key="k-1")
    count = PolicyVersion.objects.count()
    again = policy_revert(actor=world.admin, version=target, key="k-1")
    assert again.replayed and again.version == first.version
    plain = policy_revert(actor=world.admin, version=target)
    assert not plain.changed and plain.version == first.version
    assert PolicyVersion.objects.count() == count
    with pytest.raises(PolicyError) as err:
        policy_revert(actor=world.admin, version=target.parent, key="k-1")
    assert err.value.field == "key"


def test_only_admins_revert_or_propose(world):
    target = _v(world)
    with pytest.raises(PermissionDenied):
        policy_revert(actor=world.alice, version=target)
    with pytest.raises(PermissionDenied):
        policy_version_propose(actor=world.alice, snapshot={})


def test_proposal_from_a_partial_snapshot_changes_nothing_in_force(world):
    before = policy_snapshot()
    draft = policy_version_propose(
        actor=world.admin,
        snapshot={
            "market": {"price_step_bp": 100},
            "tenants": {"beta": {"weight": 9, "guarantees": {"H100": 2}}},
        },
        reason="try",
    )
    assert (draft.kind, draft.status) == (VersionKind.PROPOSED, VersionStatus.PROPOSED)
    assert policy_snapshot() == before
    assert [tuple(c) for c in snapshot_diff(before, draft.snapshot)] == [
        ("market.price_step_bp", 500, 100),
        ("tenants.beta.guarantees.H100", None, 2),
        ("tenants.beta.weight", 2, 9),
    ]
    assert current_version() == draft.parent


@pytest.mark.parametrize(
    ("snapshot", "field"),
    [
        ({"market": {"price_step_bp": 0}}, "snapshot.market.price_step_bp"),
        ({"market": {"nope": 1}}, "snapshot.market.nope"),
        ({"tenants": {"beta": {"weight": 0}}}, "snapshot.tenants.beta.weight"),
        ({"tenants": {"beta": {"weight": "3"}}}, "snapshot.tenants.beta.weight"),
        ({"tenants": {"zeta": {"weight": 3}}}, "snapshot.tenants.zeta"),
        ({"tenants": {"beta": {"colour": 3}}}, "snapshot.tenants.beta.colour"),
        ({"tenants": {"beta": {"guarantees": {"B200": 1}}}}, "snapshot.tenants.beta.guarantees.B200"),
        (
            {"tenants": {"beta": {"allowance": {"amount": 0, "period": "week", "cap": 1, "active": True}}}},
            "snapshot.tenants.beta.allowance.amount",
        ),
        ({"gpu_types": {"H100": {"reserve_price": 5, "max_price": 4}}}, "snapshot.gpu_types.H100.max_price"),
        ({"gpu_types": {"B200": {"reserve_price": 1, "max_price": 4}}}, "snapshot.gpu_types.B200"),
        ({"weather": {}}, "snapshot.weather"),
        ([], "snapshot"),
    ],
)
def test_proposal_refuses_what_the_writers_refuse_naming_the_path(world, snapshot, field):
    with pytest.raises(PolicyError) as err:
        policy_version_propose(actor=world.admin, snapshot=snapshot)
    assert err.value.field == field
    assert not PolicyVersion.objects.filter(status=VersionStatus.PROPOSED).exists()


def test_proposal_guarantees_within_the_cluster(world):
    world.nodes(world.h100, 1, size=8)
    with pytest.raises(PolicyError) as err:
        policy_version_propose(
            actor=world.admin,
            snapshot={"tenants": {"alpha": {"guarantees": {"H100": 5}}, "beta": {"guarantees": {"H100": 4}}}},
        )
    assert err.value.field == "snapshot.guarantees.H100"
    assert Tenant.objects.count() == 3
