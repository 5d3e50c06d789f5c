"""Policy versions: one per write, none for a no-op, immutable (docs/policy.md §Versions)."""

from __future__ import annotations

import pytest

from accounts.models import Tenant
from inventory.models import GpuType
from market.models import ImmutableVersionError, PolicyVersion, VersionKind, VersionStatus
from market.selectors.policy_snapshot import policy_snapshot
from market.selectors.policy_versions import current_version
from market.services.allowance import allowance_set
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.guarantees import guarantee_set
from market.services.policy import policy_update, tenant_policy_update


def _numbers() -> list[int]:
    return list(PolicyVersion.objects.order_by("number").values_list("number", flat=True))


def test_first_write_records_the_state_before_it_and_the_write(world):
    before = policy_snapshot()
    policy_update(actor=world.admin, min_runtime_s=900, reason="longer runs")
    first, second = PolicyVersion.objects.order_by("number")
    assert (first.number, first.kind, first.status, first.actor) == (1, "change", "applied", None)
    assert first.snapshot == before
    assert second.number == 2 and second.parent == first
    assert (second.actor, second.reason, second.kind) == (world.admin, "longer runs", VersionKind.CHANGE)
    assert second.snapshot == policy_snapshot()
    assert second.snapshot["market"]["min_runtime_s"] == 900


def test_each_writer_records_one_version_and_a_no_op_none(world):
    policy_update(actor=world.admin, min_runtime_s=900)
    start = len(_numbers())
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=5, guarantees={"H100": 2, "A100": 1})
    assert len(_numbers()) == start + 1  # the nested guarantee_set calls join the one version
    gpu_type_policy_save(
        name="H100", memory_gb=80, reserve_price=3_000_000, max_price=20_000_000, actor=world.admin
    )
    allowance_set(actor=world.admin, tenant=world.beta, amount=10, period="week", cap=100, reason="top-up")
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=1, actor=world.admin)
    assert len(_numbers()) == start + 4
    version = current_version()
    assert version is not None and version.snapshot == policy_snapshot()

    policy_update(actor=world.admin, min_runtime_s=900)
    tenant_policy_update(actor=world.admin, tenant=world.beta, weight=5, guarantees={"H100": 2})
    gpu_type_policy_save(
        name="H100", memory_gb=80, reserve_price=3_000_000, max_price=20_000_000, actor=world.admin
    )
    allowance_set(actor=world.admin, tenant=world.beta, amount=10, period="week", cap=100)
    assert len(_numbers()) == start + 4


def test_a_refused_write_records_no_version(world):
    from config.errors import PolicyError

    policy_update(actor=world.admin, min_runtime_s=900)
    count = PolicyVersion.objects.count()
    with pytest.raises(PolicyError):
        tenant_policy_update(actor=world.admin, tenant=world.beta, weight=5, guarantees={"B200": 1})
    with pytest.raises(PolicyError) as err:
        policy_update(actor=world.admin, min_runtime_s=1000, reason="x" * 1001)
    assert err.value.field == "reason"
    assert PolicyVersion.objects.count() == count


def test_drift_outside_the_services_is_its_own_version(world):
    policy_update(actor=world.admin, min_runtime_s=900)
    Tenant.objects.create(name="Delta", slug="delta")
    policy_update(actor=world.admin, min_runtime_s=950)
    drift, change = PolicyVersion.objects.order_by("-number")[1], current_version()
    assert "delta" in drift.snapshot["tenants"] and drift.actor is None
    assert change is not None and change.parent == drift


def test_versions_are_immutable(world):
    policy_update(actor=world.admin, min_runtime_s=900, reason="why")
    version = current_version()
    assert version is not None
    version.reason = "another story"
    with pytest.raises(ImmutableVersionError):
        version.save()
    version.snapshot = {}
    with pytest.raises(ImmutableVersionError):
        version.save(update_fields=["snapshot"])
    version.refresh_from_db()
    assert version.reason == "why" and version.snapshot == policy_snapshot()
    assert version.status == VersionStatus.APPLIED
    assert GpuType.objects.count() == 2
