"""Proposed policy versions: drafts never in force, what shadow rounds and canaries test (docs/policy.md
§Versions). A proposal is given as a full or partial snapshot; the part given is laid over the policy in force
and the whole is checked with the writers' own checks (the same limits, the same messages), every error
naming its path in the snapshot (`snapshot.tenants.beta.weight`), so a proposal that passes here can be
applied by them."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts.audit import audit
from accounts.models import Tenant, User
from config import idempotency
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from inventory.models import GpuType
from inventory.services.gpu_types import prices_check
from market.models import PolicyVersion, VersionKind, VersionStatus
from market.models.policy import GUARANTEE_MAX, WEIGHT_LIMITS
from market.services.allowance import allowance_check
from market.services.guarantees import cluster_gpus
from market.services.policy import check_int, guardrail_check, policy_check
from market.services.policy_versions import check_reason, ensure_current, version_create

_TOP = ("market", "gpu_types", "tenants")
_TENANT = ("weight", "guardrail", "guarantees", "allowance")
_ALLOWANCE = ("amount", "period", "cap", "active")
_PRICES = ("reserve_price", "max_price")


@contextmanager
def _under(prefix: str) -> Iterator[None]:
    """Re-raise a writer's PolicyError under the path of the snapshot it checked."""
    try:
        yield
    except PolicyError as exc:
        raise PolicyError(f"{prefix}.{exc.field}", exc.message) from exc


def _mapping(path: str, value: Any, keys: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(path, "must be an object")
    for key in value:
        if not isinstance(key, str) or (keys is not None and key not in keys):
            raise PolicyError(f"{path}.{key}", "is not a policy setting")
    return value


def snapshot_merge(base: Mapping[str, Any], partial: Any) -> dict[str, Any]:
    """`partial` laid over `base`: named knobs, GPU types' bounds and tenants' settings replace theirs;
    a tenant's guarantees merge by type (0 removes one), an allowance is replaced whole (null: none)."""
    out = copy.deepcopy(dict(base))
    partial = _mapping("snapshot", partial, _TOP)
    out["market"].update(_mapping("snapshot.market", partial.get("market", {})))
    for name, prices in _mapping("snapshot.gpu_types", partial.get("gpu_types", {})).items():
        path = f"snapshot.gpu_types.{name}"
        out["gpu_types"].setdefault(name, {}).update(_mapping(path, prices, _PRICES))
    for slug, given in _mapping("snapshot.tenants", partial.get("tenants", {})).items():
        path = f"snapshot.tenants.{slug}"
        if slug not in out["tenants"]:
            raise PolicyError(path, "is not an active tenant")
        tenant = out["tenants"][slug]
        for key, value in _mapping(path, given, _TENANT).items():
            if key == "guarantees":
                merged = {**tenant["guarantees"], **_mapping(f"{path}.guarantees", value)}
                tenant["guarantees"] = {k: v for k, v in sorted(merged.items()) if v != 0}
            else:
                tenant[key] = value
    return out


def _check_tenant(path: str, policy: Any) -> None:
    policy = _mapping(path, policy, _TENANT)
    for key in _TENANT:
        if key not in policy:
            raise PolicyError(f"{path}.{key}", "is missing")
    with _under(path):
        check_int("weight", policy["weight"], *WEIGHT_LIMITS)
        guardrail_check(policy["guardrail"])
    for name, gpus in _mapping(f"{path}.guarantees", policy["guarantees"]).items():
        check_int(f"{path}.guarantees.{name}", gpus, 0, GUARANTEE_MAX)
    allowance = policy["allowance"]
    if allowance is not None:
        allowance = _mapping(f"{path}.allowance", allowance, _ALLOWANCE)
        with _under(f"{path}.allowance"):
            allowance_check(allowance.get("amount"), allowance.get("period"), allowance.get("cap"))
        if not isinstance(allowance.get("active"), bool):
            raise PolicyError(f"{path}.allowance.active", "must be true or false")


def snapshot_check(snapshot: Any) -> None:
    """PolicyError naming the first value a writer would refuse, by its path in the snapshot."""
    snapshot = _mapping("snapshot", snapshot, _TOP)
    market = _mapping("snapshot.market", snapshot.get("market"))
    with _under("snapshot.market"):
        policy_check(dict(market))
    types = GpuType.objects.in_bulk(field_name="name")
    for name, prices in _mapping("snapshot.gpu_types", snapshot.get("gpu_types")).items():
        path = f"snapshot.gpu_types.{name}"
        if name not in types:
            raise PolicyError(path, "is not a GPU type")
        prices = _mapping(path, prices, _PRICES)
        with _under(path):
            for key in _PRICES:
                check_int(key, prices.get(key), 0, MAX_AMOUNT)
            prices_check(prices["reserve_price"], prices["max_price"])
    active = set(Tenant.objects.filter(active=True).values_list("slug", flat=True))
    totals: dict[str, int] = {}
    for slug, policy in _mapping("snapshot.tenants", snapshot.get("tenants")).items():
        path = f"snapshot.tenants.{slug}"
        if slug not in active:
            raise PolicyError(path, "is not an active tenant")
        _check_tenant(path, policy)
        for name, gpus in policy["guarantees"].items():
            if name not in types:
                raise PolicyError(f"{path}.guarantees.{name}", "is not a GPU type")
            totals[name] = totals.get(name, 0) + gpus
    for name, total in sorted(totals.items()):
        capacity = cluster_gpus(types[name])
        if capacity is not None and total > capacity:
            raise PolicyError(
                f"snapshot.guarantees.{name}",
                f"guarantees for {name} would total {total} GPUs but the cluster has {capacity}",
            )


KEY_MAX = idempotency.KEY_MAX_CHARS


def _replayed(key: str | None, detail: Mapping[str, Any], digest: str) -> PolicyVersion | None:
    """The draft a first send of the same form made (called under the policy lock, so two sends of one
    form serialise and the second finds the first's). A key reused for a draft from elsewhere (another
    what-if run) is refused rather than answered with a draft the caller did not ask for (config/idempotency.py:
    the one rule)."""
    if key is None:
        return None
    key = idempotency.check_key(key, field="key", required=True)
    return idempotency.replay(
        key=key,
        found=PolicyVersion.objects.filter(kind=VersionKind.PROPOSED, detail__key=key).first(),
        # A draft made before the digest was kept is compared by where it came from only.
        same=lambda first: (
            first.detail.get("digest", digest) == digest
            and all(first.detail.get(k) == v for k, v in detail.items())
        ),
        name=lambda first: f"draft version {first.number}",
        field="key",
    )


@transaction.atomic
def policy_version_propose(
    *,
    actor: User | None,
    snapshot: Any,
    reason: str = "",
    detail: Mapping[str, Any] | None = None,
    key: str | None = None,
) -> PolicyVersion:
    """Record a proposed version: `snapshot` (full or partial) over the policy in force, checked whole.
    Nothing in force changes; the draft's parent is the version it was proposed against.

    `detail` is kept on the version (where the draft came from: a what-if run names itself there, since
    market must not know whatif). With a `key` (a console form's nonce) a resent form returns the draft the
    first send made instead of a second one."""
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may propose policy.")
    reason = check_reason(reason)
    base = ensure_current()
    digest = idempotency.request_digest({"snapshot": snapshot, "reason": reason, "detail": detail or {}})
    if (first := _replayed(key, detail or {}, digest)) is not None:
        return first
    proposal = snapshot_merge(base.snapshot, snapshot)
    snapshot_check(proposal)
    version = version_create(
        snapshot=proposal,
        actor=actor,
        reason=reason,
        kind=VersionKind.PROPOSED,
        status=VersionStatus.PROPOSED,
        parent=base,
        detail={**(detail or {}), **({"key": key, "digest": digest} if key else {})},
    )
    audit(
        actor=actor,
        tenant=None,
        action="policy.propose",
        detail={"version": version.number, "reason": reason},
    )
    return version
