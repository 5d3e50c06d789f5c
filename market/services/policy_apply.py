"""Applying a version's snapshot through the policy writers, and the revert (docs/policy.md §Versions).

`snapshot_apply` is the one way a stored snapshot becomes the policy: by policy_update, gpu_type_save,
tenant_policy_update and allowance_set, so every rule those keep (limits, the cluster's capacity for
guarantees, locks, audit rows) holds for a revert, a canary and a promotion as for a hand-made change. What the
snapshot names that no longer exists (a deleted GPU type, a deleted or deactivated tenant) is skipped and
reported; what exists now that the snapshot does not name (a tenant or type created since) is left as it is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts.audit import audit
from accounts.models import Tenant, User
from config import idempotency
from inventory.models import GpuType
from inventory.services.gpu_types import gpu_type_save
from market.models import Allowance, Guarantee, PolicyVersion, ShadowRun, VersionKind, VersionStatus
from market.selectors.policy_versions import current_version, version_target
from market.services.allowance import allowance_set
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_versions import check_reason, lock_policy, policy_versioned
from market.services.shadow import shadow_stop

KEY_MAX = idempotency.KEY_MAX_CHARS


@dataclass
class Applied:
    skipped_tenants: list[str] = field(default_factory=list)
    skipped_types: list[str] = field(default_factory=list)

    def as_detail(self) -> dict[str, list[str]]:
        return {"skipped_tenants": self.skipped_tenants, "skipped_types": self.skipped_types}


def _apply_market(admin: User, target: Mapping[str, Any], applied: Applied) -> None:
    policy_update(actor=admin, **dict(target["market"]))
    types = GpuType.objects.in_bulk(list(target["gpu_types"]), field_name="name")
    for name in sorted(target["gpu_types"]):
        if name not in types:
            applied.skipped_types.append(name)
            continue
        prices = target["gpu_types"][name]
        gpu_type_save(
            name=name,
            memory_gb=types[name].memory_gb,
            reserve_price=prices["reserve_price"],
            max_price=prices["max_price"],
            actor=admin,
        )


def _guarantee_steps(
    tenant: Tenant, wanted: Mapping[str, int], types: Collection[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """The guarantees to lower and to raise (types the snapshot does not name go to 0). Lowered first, for
    every tenant, because guarantee_set keeps each type's sum within the cluster at every step."""
    held = dict(Guarantee.objects.filter(tenant=tenant).values_list("gpu_type__name", "gpus"))
    lower, raise_ = {}, {}
    for name in sorted((set(held) | set(wanted)) & set(types)):
        old, new = held.get(name, 0), wanted.get(name, 0)
        if new < old:
            lower[name] = new
        elif new > old:
            raise_[name] = new
    return lower, raise_


def _apply_allowance(admin: User, tenant: Tenant, wanted: Mapping[str, Any] | None) -> None:
    if wanted is not None:
        allowance_set(actor=admin, tenant=tenant, **dict(wanted))
        return
    # No allowance in the snapshot: the row is deactivated, not deleted, because it remembers the last period
    # paid (a new row would pay the current period again).
    held = Allowance.objects.filter(tenant=tenant, active=True).first()
    if held is not None:
        allowance_set(
            actor=admin, tenant=tenant, amount=held.amount, period=held.period, cap=held.cap, active=False
        )


def _apply_tenants(
    admin: User, target: Mapping[str, Any], only: Collection[str] | None, applied: Applied
) -> None:
    slugs = sorted(s for s in target["tenants"] if only is None or s in only)
    tenants = Tenant.objects.filter(active=True).in_bulk(slugs, field_name="slug")
    applied.skipped_tenants += [s for s in slugs if s not in tenants]
    types = set(GpuType.objects.values_list("name", flat=True))
    for slug in slugs:
        for name in target["tenants"][slug]["guarantees"]:
            if name not in types and name not in applied.skipped_types:
                applied.skipped_types.append(name)
    steps = {s: _guarantee_steps(t, target["tenants"][s]["guarantees"], types) for s, t in tenants.items()}
    for slug, tenant in tenants.items():
        wanted = target["tenants"][slug]
        tenant_policy_update(
            actor=admin,
            tenant=tenant,
            weight=wanted["weight"],
            guardrail=wanted["guardrail"],
            guarantees=steps[slug][0],
        )
        _apply_allowance(admin, tenant, wanted["allowance"])
    for slug, tenant in tenants.items():
        if steps[slug][1]:
            tenant_policy_update(actor=admin, tenant=tenant, guarantees=steps[slug][1])


def snapshot_apply(
    *, admin: User, target: Mapping[str, Any], tenants: Collection[str] | None = None, market: bool = True
) -> Applied:
    """Make the policy what `target` says: its market knobs and GPU type prices (with `market`) and its
    tenants' settings (all of them, or those in `tenants`). Run inside a policy_versioned frame, so the whole
    is one version; a refusal by any writer undoes all of it."""
    applied = Applied()
    with transaction.atomic():
        if market:
            _apply_market(admin, target, applied)
        _apply_tenants(admin, target, tenants, applied)
    applied.skipped_types.sort()
    return applied


@dataclass(frozen=True)
class RevertResult:
    version: PolicyVersion | None  # the revert version; the one in force when the revert changed nothing
    changed: bool
    replayed: bool  # a retry of a revert already made with the same key
    skipped_tenants: list[str]
    skipped_types: list[str]


def _replay(key: str, target: PolicyVersion, reason: str) -> RevertResult | None:
    """The revert a first call with `key` made (config/idempotency.py: the one rule); a key used for a revert
    to another version, or with another reason, is refused."""
    made = idempotency.replay(
        key=key,
        found=PolicyVersion.objects.filter(
            kind__in=(VersionKind.REVERT, VersionKind.APPLY), detail__key=key
        ).first(),
        same=lambda made: made.parent_id == target.pk and made.reason == reason,
        name=lambda made: (
            f"version {made.number}, a revert to version {made.parent.number if made.parent else '-'}"
        ),
        field="key",
    )
    if made is None:
        return None
    detail = made.detail
    return RevertResult(made, True, True, detail.get("skipped_tenants", []), detail.get("skipped_types", []))


def _stop_shadow(actor: User, draft: PolicyVersion) -> None:
    """An applied draft's shadow compares the policy in force with itself: every round would read "nothing
    changed". It stops with the apply (audited as a shadow.stop)."""
    if ShadowRun.objects.filter(version=draft, stopped_at__isnull=True).exists():
        shadow_stop(actor=actor, version=draft)


@transaction.atomic
def policy_revert(
    *, actor: User | None, version: PolicyVersion, reason: str = "", key: str | None = None
) -> RevertResult:
    """Make `version`'s snapshot the policy in force for everyone, as one new version of kind revert whose
    parent is `version` (of kind apply when `version` is a proposed draft). Idempotent: a retry with the same
    `key` returns the first revert; without a key, a repeat finds the policy already equal to the snapshot and
    changes nothing (no version)."""
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may revert policy.")
    reason = check_reason(reason)
    if key is not None:
        key = idempotency.check_key(key, field="key", required=True)
    lock_policy()  # a retry racing the first waits here, then finds its version
    if key is not None and (replay := _replay(key, version, reason)) is not None:
        return replay
    # A draft applied to everyone is an apply, not a step back (issue 37 §5): its own kind and audit action.
    draft = version.status == VersionStatus.PROPOSED
    kind = VersionKind.APPLY if draft else VersionKind.REVERT
    with policy_versioned(actor=actor, reason=reason, kind=kind, parent=version) as frame:
        applied = snapshot_apply(admin=actor, target=version_target(version))
        frame.detail.update(applied.as_detail(), **({"key": key} if key else {}))
    made = frame.version
    audit(
        actor=actor,
        tenant=None,
        action="policy.apply" if draft else "policy.revert",
        detail={
            "to": version.number,
            "version": made.number if made else None,
            "reason": reason,
            **applied.as_detail(),
        },
    )
    if draft and made is not None:
        _stop_shadow(actor, version)
    return RevertResult(
        made or current_version(), made is not None, False, applied.skipped_tenants, applied.skipped_types
    )
