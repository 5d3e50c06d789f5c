"""Reads of policy versions and the one diff between two snapshots (docs/policy.md §Versions)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

from django.db.models import QuerySet

from market.models import PolicyVersion, VersionKind, VersionStatus


class Change(NamedTuple):
    """One field that differs: its dotted path in the snapshot (`tenants.beta.guarantees.H100`), and its value
    on each side; None where the field is absent on that side (a tenant added since, a guarantee removed)."""

    path: str
    old: Any
    new: Any


def _leaves(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """Flatten nested mappings to {dotted path: leaf}. A None where the other side has a mapping (no allowance
    against one) compares as None against each of its fields, which is how it reads in the diff."""
    if isinstance(value, Mapping):
        for key in value:
            _leaves(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def snapshot_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """Every field whose value differs between two snapshots, in path order."""
    a, b = _leaves(old, "", {}), _leaves(new, "", {})
    return [
        Change(path, a.get(path), b.get(path))
        for path in sorted(a.keys() | b.keys())
        if a.get(path) != b.get(path)
    ]


def _units(snapshot: Mapping[str, Any]) -> dict[tuple[str, ...], Any]:
    """A snapshot as the units a proposal changes one by one: each market knob, each GPU type's price bounds,
    and per tenant its weight, its guardrail, its allowance (whole) and each type's guarantee."""
    out: dict[tuple[str, ...], Any] = {}
    for knob, value in snapshot.get("market", {}).items():
        out["market", knob] = value
    for name, prices in snapshot.get("gpu_types", {}).items():
        out["gpu_types", name] = prices
    for slug, tenant in snapshot.get("tenants", {}).items():
        for field in ("weight", "guardrail", "allowance"):
            out["tenants", slug, field] = tenant.get(field)
        for type_name, gpus in tenant.get("guarantees", {}).items():
            out["tenants", slug, "guarantees", type_name] = gpus
    return out


def rebased(proposal: Mapping[str, Any], *, on: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """The policy `now` with what `proposal` changed against `on` (the policy it was proposed on) laid over it:
    a change made since the proposal to something it did not touch stays. A tenant or GPU type the proposal
    names that is gone now is kept in, for the apply to report as skipped."""
    out: dict[str, Any] = copy.deepcopy(dict(now))
    before, after = _units(on), _units(proposal)
    for unit in sorted(before.keys() | after.keys()):
        if before.get(unit) == after.get(unit):
            continue
        value = copy.deepcopy(after.get(unit))
        if unit[0] == "market":
            if value is not None:
                out["market"][unit[1]] = value
        elif unit[0] == "gpu_types":
            if value is not None:
                out["gpu_types"][unit[1]] = value
        elif unit[1] in proposal.get("tenants", {}):  # a tenant the proposal left out is not its change
            tenant = out["tenants"].setdefault(unit[1], copy.deepcopy(proposal["tenants"][unit[1]]))
            if unit[2] == "guarantees":
                if value is None:
                    tenant["guarantees"].pop(unit[3], None)
                else:
                    tenant["guarantees"][unit[3]] = value
            else:
                tenant[unit[2]] = value
    return out


def version_target(version: PolicyVersion) -> dict[str, Any]:
    """What applying `version` makes the policy now. An applied version is restored as it was (a revert means
    exactly that version). A proposed one is a change, not a state: its own changes against the version it was
    proposed on, laid over the policy in force, so applying a draft made last week does not undo what changed
    since (docs/policy.md §Versions)."""
    # Imported here: the snapshot reads the policy services' limits, and those services import this module
    # (through policy_versions) to record versions.
    from market.selectors.policy_snapshot import policy_snapshot

    if version.status != VersionStatus.PROPOSED or version.parent is None:
        return dict(version.snapshot)
    return rebased(version.snapshot, on=version.parent.snapshot, now=policy_snapshot())


def current_version() -> PolicyVersion | None:
    """The version in force: the newest applied one (None before the first policy write)."""
    return PolicyVersion.objects.filter(status=VersionStatus.APPLIED).order_by("-number").first()


def applied_as(*, drafts: list[PolicyVersion]) -> dict[int, PolicyVersion]:
    """For each of these proposed drafts that was applied to everyone, the first version that applied it
    (by draft pk): a draft stays a draft (its record never changes), but it no longer waits to be tried."""
    found: dict[int, PolicyVersion] = {}
    made = PolicyVersion.objects.filter(
        kind=VersionKind.APPLY, parent__in=[d.pk for d in drafts if d.status == VersionStatus.PROPOSED]
    ).order_by("number")
    for version in made:
        found.setdefault(version.parent_id or 0, version)
    return found


def versions(*, status: str | None = None) -> QuerySet[PolicyVersion]:
    """Versions newest first, with who made them."""
    qs = PolicyVersion.objects.select_related("actor", "parent").order_by("-number")
    return qs.filter(status=status) if status else qs


def version_by_number(number: int) -> PolicyVersion | None:
    return PolicyVersion.objects.select_related("actor", "parent").filter(number=number).first()
