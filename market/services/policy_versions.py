"""One version per policy write (docs/policy.md §Versions): the helper every policy writer wraps its write in.

`policy_versioned` is the one place a version is recorded. Each writer (policy_update, tenant_policy_update,
guarantee_set, gpu_type_save, allowance_set, whatif_apply, the revert and the canary services) runs its write
inside it; the outermost one in a call stack takes the snapshot after the write and, if the policy changed,
records one version in the same transaction. Nested writers (tenant_policy_update calling guarantee_set, a
revert calling every writer) join the outer one, so one action is one version.

All policy writes serialise on the market policy row (locked first, before any tenant or GPU type row), which
makes version numbers gapless in order of commit and lets the snapshot before the write be compared with the
newest version: if they differ, something changed the policy outside these services (a tenant created or
deactivated, the Django admin's raw edits), and that drift is recorded as its own version first, so each
version's diff shows only its own write. The first version is made the same way, lazily, from the state before
the first write.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Max

from accounts.models import User
from config.errors import PolicyError
from market.models import MarketPolicy, PolicyVersion, VersionKind, VersionStatus
from market.selectors.policy import market_policy
from market.selectors.policy_versions import current_version

if TYPE_CHECKING:
    from market.selectors.policy_snapshot import PolicySnapshot

REASON_MAX = 1000
FIRST_REASON = "the policy as it stood before versions were recorded"
DRIFT_REASON = "changed outside the policy services (tenants added or deactivated, raw edits)"


@dataclass
class VersionFrame:
    """What the outermost writer records; nested writers may add to `detail` (a revert's skipped tenants)."""

    actor: User | None
    reason: str
    kind: str
    parent: PolicyVersion | None
    detail: dict[str, Any] = field(default_factory=dict)
    version: PolicyVersion | None = None  # set on leaving, when the write changed the policy


_frame: ContextVar[VersionFrame | None] = ContextVar("policy_version_frame", default=None)


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str):
        raise PolicyError("reason", "must be text")
    if len(reason) > REASON_MAX:
        raise PolicyError("reason", f"must be at most {REASON_MAX} characters")
    return reason.strip()


def _snapshot() -> PolicySnapshot:
    # Imported here: policy_snapshot reads POLICY_LIMITS from market.services.policy, which imports this module.
    from market.selectors.policy_snapshot import policy_snapshot

    return policy_snapshot()


def lock_policy() -> None:
    """Take the lock every policy write holds first (the market policy row)."""
    market_policy()  # creates the row with its defaults on first use
    MarketPolicy.objects.select_for_update(no_key=True).filter(singleton=1).first()


def _next_number() -> int:
    return int(PolicyVersion.objects.aggregate(top=Max("number"))["top"] or 0) + 1


def version_create(
    *,
    snapshot: PolicySnapshot | dict[str, Any],
    actor: User | None,
    reason: str,
    kind: str,
    status: str,
    parent: PolicyVersion | None,
    detail: dict[str, Any] | None = None,
) -> PolicyVersion:
    """Write one version; callers hold the policy lock (lock_policy). No audit row of its own: the write it
    records is audited by its writer (policy.update, policy.revert, canary.start, ...), and the version is
    itself the record of who, when and why."""
    return PolicyVersion.objects.create(
        number=_next_number(),
        snapshot=snapshot,
        actor=actor,
        reason=reason,
        kind=kind,
        status=status,
        parent=parent,
        detail=detail or {},
    )


def ensure_current() -> PolicyVersion:
    """The version in force, recorded first if there is none or the policy drifted from it (see the module's
    docstring). Takes the policy lock."""
    lock_policy()
    now = _snapshot()
    current = current_version()
    if current is None or current.snapshot != now:
        current = version_create(
            snapshot=now,
            actor=None,
            reason=FIRST_REASON if current is None else DRIFT_REASON,
            kind=VersionKind.CHANGE,
            status=VersionStatus.APPLIED,
            parent=current,
        )
    return current


@contextmanager
def policy_versioned(
    *,
    actor: User | None,
    reason: str = "",
    kind: str = VersionKind.CHANGE,
    parent: PolicyVersion | None = None,
    always: bool = False,
) -> Iterator[VersionFrame]:
    """Run a policy write; on leaving, record a version if it changed the policy (none for a no-op write), or
    in any case with `always` (a canary's steps, which the canary row points at).

    Nested: joins the outer frame and records nothing itself. `parent` defaults to the version in force before
    the write (a revert names the version it restores instead)."""
    outer = _frame.get()
    if outer is not None:
        yield outer
        return
    reason = check_reason(reason)
    with transaction.atomic():
        before = ensure_current()
        frame = VersionFrame(actor=actor, reason=reason, kind=kind, parent=parent or before)
        token = _frame.set(frame)
        try:
            yield frame
        finally:
            _frame.reset(token)
        after = _snapshot()
        if after != before.snapshot or always:
            frame.version = version_create(
                snapshot=after,
                actor=frame.actor,
                reason=frame.reason,
                kind=frame.kind,
                status=VersionStatus.APPLIED,
                parent=frame.parent,
                detail=frame.detail,
            )
