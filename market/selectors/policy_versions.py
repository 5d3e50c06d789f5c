"""Reads of policy versions and the one diff between two snapshots (docs/policy.md §Versions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from django.db.models import QuerySet

from market.models import PolicyVersion, VersionStatus


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


def current_version() -> PolicyVersion | None:
    """The version in force: the newest applied one (None before the first policy write)."""
    return PolicyVersion.objects.filter(status=VersionStatus.APPLIED).order_by("-number").first()


def versions(*, status: str | None = None) -> QuerySet[PolicyVersion]:
    """Versions newest first, with who made them."""
    qs = PolicyVersion.objects.select_related("actor", "parent").order_by("-number")
    return qs.filter(status=status) if status else qs


def version_by_number(number: int) -> PolicyVersion | None:
    return PolicyVersion.objects.select_related("actor", "parent").filter(number=number).first()
