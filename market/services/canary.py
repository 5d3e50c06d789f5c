"""Canaries: a version tried on a few tenants and/or for a bounded time, reverted automatically when a
guardrail trips (docs/policy.md §Canary). Every step is a policy version (canary-start, canary-promote,
canary-revert) applied by market.services.policy_apply.snapshot_apply, and an audit row (canary.start,
canary.promote, canary.revert, canary.expire)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from accounts.audit import audit
from accounts.models import User
from config.errors import PolicyError
from market.models import CanaryState, OnExpiry, PolicyCanary, PolicyVersion, VersionKind
from market.selectors.canary import canary_figures, tripped
from market.selectors.policy_versions import version_target
from market.services.policy import check_int
from market.services.policy_apply import snapshot_apply
from market.services.policy_versions import check_reason, lock_policy, policy_versioned

DURATION_LIMITS = (60, 30 * 86_400)
WINDOW_LIMITS = (60, 7 * 86_400)
GUARDRAIL_LIMITS: dict[str, tuple[int, int]] = {
    "min_compliance_pct": (0, 100),
    "max_failed_rounds": (0, 1_000_000),
    "max_preemptions_per_hour": (0, 1_000_000),
}


class CanaryConflict(Exception):
    """The request does not fit the canaries' state: another one runs, or this one has ended (HTTP 409)."""

    code = "canary_conflict"


def _admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may run canaries.")
    return actor


def _check_tenants(version: PolicyVersion, tenants: Any) -> list[str]:
    if not isinstance(tenants, Sequence) or isinstance(tenants, str):
        raise PolicyError("tenants", "must be a list of tenant slugs")
    for slug in tenants:
        if not isinstance(slug, str) or slug not in version.snapshot["tenants"]:
            raise PolicyError("tenants", f"{slug!r} is not a tenant of version {version.number}")
    return sorted(set(tenants))


def _check_start(
    version: PolicyVersion,
    tenants: Any,
    market: Any,
    duration_s: Any,
    on_expiry: Any,
    window_s: Any,
    guards: dict[str, Any],
) -> list[str]:
    chosen = _check_tenants(version, tenants)
    if not isinstance(market, bool):
        raise PolicyError("market", "must be true or false")
    if not chosen and not market:
        raise PolicyError("tenants", "name at least one tenant, or include the market part")
    if duration_s is not None:
        check_int("duration_s", duration_s, *DURATION_LIMITS)
    if on_expiry not in OnExpiry.values:
        raise PolicyError("on_expiry", f"must be one of {', '.join(OnExpiry.values)}")
    check_int("window_s", window_s, *WINDOW_LIMITS)
    for name, value in guards.items():
        if value is not None:
            check_int(name, value, *GUARDRAIL_LIMITS[name])
    return chosen


@transaction.atomic
def canary_start(
    *,
    actor: User | None,
    version: PolicyVersion,
    tenants: Sequence[str] = (),
    market: bool = False,
    duration_s: int | None = None,
    on_expiry: str = OnExpiry.REVERT,
    window_s: int = 3600,
    min_compliance_pct: int | None = None,
    max_failed_rounds: int | None = None,
    max_preemptions_per_hour: int | None = None,
    reason: str = "",
) -> PolicyCanary:
    """Apply `version`'s settings for `tenants` (weight, guardrail, guarantees, allowance) and, with `market`,
    its market knobs and GPU type prices; everything else stays as it is. One canary runs at a time."""
    admin = _admin(actor)
    guards = {
        "min_compliance_pct": min_compliance_pct,
        "max_failed_rounds": max_failed_rounds,
        "max_preemptions_per_hour": max_preemptions_per_hour,
    }
    chosen = _check_start(version, tenants, market, duration_s, on_expiry, window_s, guards)
    reason = check_reason(reason)
    lock_policy()  # two starts at once: the second waits here and then finds the first running
    if PolicyCanary.objects.filter(state=CanaryState.RUNNING).exists():
        raise CanaryConflict("another canary is running; promote or end it first")
    with policy_versioned(actor=admin, reason=reason, kind=VersionKind.CANARY_START, always=True) as frame:
        applied = snapshot_apply(admin=admin, target=version_target(version), tenants=chosen, market=market)
        frame.detail.update(applied.as_detail(), canary_of=version.number, tenants=chosen, market=market)
    assert frame.version is not None and frame.parent is not None  # always=True records one
    canary = PolicyCanary.objects.create(
        version=version,
        base=frame.parent,
        started=frame.version,
        tenants=chosen,
        market=market,
        started_by=admin,
        ends_at=timezone.now() + timedelta(seconds=duration_s) if duration_s is not None else None,
        on_expiry=on_expiry,
        window_s=window_s,
        **guards,
    )
    audit(
        actor=admin,
        tenant=None,
        action="canary.start",
        detail={
            "canary": canary.pk,
            "version": version.number,
            "tenants": chosen,
            "market": market,
            "duration_s": duration_s,
            "on_expiry": on_expiry,
            "window_s": window_s,
            **guards,
            "reason": reason,
            **applied.as_detail(),
        },
    )
    return canary


def _writer(canary: PolicyCanary, actor: User | None) -> User:
    """Who the writers act as: the admin acting, or for an automatic step the one who started the canary (or,
    gone since, any active admin), since the writers accept admins only; the version and the canary's audit
    row name no actor then."""
    writer = (
        actor
        or canary.started_by
        or User.objects.filter(is_staff=True, is_active=True).order_by("pk").first()
    )
    if writer is None:
        raise PermissionDenied("no platform admin to act for the canary")
    return writer


def _running(canary_id: int) -> PolicyCanary:
    lock_policy()
    canary = (
        PolicyCanary.objects.select_for_update(no_key=True, of=("self",))
        .select_related("version", "base")
        .get(pk=canary_id)
    )
    if canary.state != CanaryState.RUNNING:
        raise CanaryConflict(f"this canary was {canary.state} already")
    return canary


def _end(
    canary: PolicyCanary, *, actor: User | None, promote: bool, reason: str, action: str
) -> PolicyCanary:
    writer = _writer(canary, actor)
    kind = VersionKind.CANARY_PROMOTE if promote else VersionKind.CANARY_REVERT
    parent = canary.version if promote else canary.base
    with policy_versioned(actor=actor, reason=reason, kind=kind, parent=parent, always=True) as frame:
        if promote:
            applied = snapshot_apply(admin=writer, target=version_target(canary.version))
        else:
            # Only what the canary changed goes back, so changes made to others meanwhile stay.
            applied = snapshot_apply(
                admin=writer, target=canary.base.snapshot, tenants=canary.tenants, market=canary.market
            )
        frame.detail.update(applied.as_detail(), canary=canary.pk)
    canary.state = CanaryState.PROMOTED if promote else CanaryState.REVERTED
    canary.ended, canary.ended_at, canary.end_reason = frame.version, timezone.now(), reason
    canary.save(update_fields=["state", "ended", "ended_at", "end_reason"])
    audit(
        actor=actor,
        tenant=None,
        action=action,
        detail={
            "canary": canary.pk,
            "version": frame.version.number if frame.version else None,
            "reason": reason,
            **applied.as_detail(),
        },
    )
    return canary


@transaction.atomic
def canary_promote(*, actor: User | None, canary_id: int, reason: str = "") -> PolicyCanary:
    """Apply the canary's version to everyone (all tenants, market knobs, GPU type prices)."""
    admin = _admin(actor)
    reason = check_reason(reason)
    return _end(_running(canary_id), actor=admin, promote=True, reason=reason, action="canary.promote")


@transaction.atomic
def canary_revert(*, actor: User | None, canary_id: int, reason: str = "") -> PolicyCanary:
    """End the canary by putting back, for its tenants (and market part), the version before it."""
    admin = _admin(actor)
    reason = check_reason(reason)
    return _end(_running(canary_id), actor=admin, promote=False, reason=reason, action="canary.revert")


@transaction.atomic
def canary_check(*, now: datetime | None = None) -> PolicyCanary | None:
    """The guardrails' judgement, by the beat and after each round: revert the running canary if one trips,
    promote or revert it per its choice once its time is up. Returns the canary it ended, if any. Safe to run
    twice at once: the second waits on the policy lock and finds none running."""
    now = now or timezone.now()
    lock_policy()
    canary = PolicyCanary.objects.select_for_update(no_key=True).filter(state=CanaryState.RUNNING).first()
    if canary is None:
        return None
    figures = canary_figures(canary, now)
    canary.checked_at, canary.last_check = now, figures.as_json()
    canary.save(update_fields=["checked_at", "last_check"])
    trip = tripped(canary, figures)
    if trip is not None:
        return _end(
            canary, actor=None, promote=False, reason=f"guardrail tripped: {trip}", action="canary.trip"
        )
    if canary.ends_at is not None and now >= canary.ends_at:
        promote = canary.on_expiry == OnExpiry.PROMOTE
        return _end(canary, actor=None, promote=promote, reason="canary time is up", action="canary.expire")
    return None
