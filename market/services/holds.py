"""Holds sized by prediction running out (docs/predictions.md §Holds sized by prediction).

A lease whose hold pays for less than its max hours (`hold_seconds < max_seconds`: its tenant sized it by
prediction) is watched at every round tick. WARN_BEFORE before it must stop, the tenant's choice applies:

- extend: the hold grows from the available balance by as long again (never past max hours), keyed per
  extension so a repeated tick extends once. When the balance cannot pay, the job's owner is warned, and
  extension is retried at each tick until the stop time;
- stop: the owner is warned (once), and the job is stopped at the stop time.

The stop is requested the job's grace period plus STOP_MARGIN before the hold runs out, so the job is gone
(SIGTERM, grace, SIGKILL) before it has used more than the hold pays for; settlement caps the charge at the
hold in any case, so nothing is ever charged beyond what the tenant agreed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.audit import audit
from allocator import hold_of
from market.models import (
    LIVE_LEASE_STATES,
    CommandKind,
    EndReason,
    HoldPolicy,
    Lease,
    OnHoldEnd,
)
from market.selectors.holds import WARN_BEFORE, stop_time
from market.services.leases import lease_request_stop
from market.services.ledger import InsufficientFunds, ledger_hold_extend


def extension_key(lease_id: int, n: int) -> str:
    return f"lease:{lease_id}:extend:{n}"


@dataclass
class HoldCheck:
    extended: list[int] = field(default_factory=list)
    warned: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


def leases_hold_check(*, fence: int, now: datetime | None = None) -> HoldCheck:
    """Extend, warn or stop every live lease whose sized hold is about to run out. Safe to repeat."""
    now = now or timezone.now()
    out = HoldCheck()
    due = Lease.objects.filter(
        state__in=LIVE_LEASE_STATES, hold_seconds__isnull=False, hold_seconds__lt=F("max_seconds")
    ).select_related("tenant")
    choices = dict(HoldPolicy.objects.values_list("tenant_id", "on_hold_end"))
    for lease in due:
        stop_at = stop_time(lease)
        if now < stop_at - WARN_BEFORE:
            continue
        # No row, or sizing turned off since: extending is what max hours would have held anyway.
        choice = choices.get(lease.tenant_id, OnHoldEnd.EXTEND)
        if choice == OnHoldEnd.EXTEND:
            if hold_extend(lease_id=lease.pk, now=now):
                out.extended.append(lease.pk)
                continue
            why = "your team's available balance cannot extend its hold"
        else:
            why = "your team chose to stop jobs that outlive their hold"
        if lease_hold_warn(lease=lease, stop_at=stop_at, why=why, now=now):
            out.warned.append(lease.pk)
        if now >= stop_at:
            lease_request_stop(
                lease_id=lease.pk, kind=CommandKind.RELEASE, reason=EndReason.HOLD_SPENT, fence=fence, now=now
            )
            out.stopped.append(lease.pk)
    return out


@transaction.atomic
def hold_extend(*, lease_id: int, now: datetime) -> bool:
    """Grow the lease's hold by as long again (capped at max hours) from the available balance. False when
    the balance cannot pay (nothing changes) or the lease is no longer live or sized."""
    # Lock order (docs/rounds.md): the lease, then its hold and the accounts (the ledger's).
    lease = Lease.objects.select_for_update(no_key=True).get(pk=lease_id)
    if lease.state not in LIVE_LEASE_STATES or lease.hold_seconds is None:
        return False
    more = min(lease.hold_seconds, lease.max_seconds - lease.hold_seconds)
    if more <= 0:
        return False
    amount = int(hold_of(lease.gpus, lease.price, more))
    n = lease.hold_extensions + 1
    try:
        with transaction.atomic():
            ledger_hold_extend(
                hold_key=lease.hold_key,
                amount=amount,
                key=extension_key(lease.pk, n),
                memo=f"lease {lease.pk}: hold extended by {more} s",
                lease_id=lease.pk,
            )
    except InsufficientFunds:
        return False
    lease.hold_seconds += more
    lease.hold_extensions, lease.hold_warned_at = n, None
    fields = ["hold_seconds", "hold_extensions", "hold_warned_at"]
    if lease.hold_share is not None:  # its part of the shared hold grows with it (settled as its share)
        lease.hold_share += amount
        fields.append("hold_share")
    lease.save(update_fields=fields)
    audit(
        actor=None,
        tenant=lease.tenant,
        action="lease.hold_extended",
        detail={"lease": lease.pk, "job": lease.job_id, "seconds": more, "amount": amount, "extension": n},
    )
    return True


def lease_hold_warn(*, lease: Lease, stop_at: datetime, why: str, now: datetime) -> bool:
    """Warn the job's owner once per hold that the job will be stopped at `stop_at`: the job page and the
    API show `hold_warned_at`, and the audit log keeps the reason. True when this call warned."""
    if Lease.objects.filter(pk=lease.pk, hold_warned_at__isnull=True).update(hold_warned_at=now) != 1:
        return False
    audit(
        actor=None,
        tenant=lease.tenant,
        action="lease.hold_warning",
        detail={"lease": lease.pk, "job": lease.job_id, "stop_at": stop_at.isoformat(), "why": why},
    )
    return True
