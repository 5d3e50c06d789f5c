"""Writes for what-if replays: ask for one, run it (the Celery task's service), apply its proposal.

Admins only. Applying goes through the policy services (market.services.policy, inventory.services.gpu_types),
so every change is audited exactly as the console's policy forms audit it, plus one `whatif.apply` row that
ties them to the replay they came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.audit import audit
from accounts.models import Tenant, User
from config.errors import PolicyError
from inventory.models import GpuType
from market.models import PolicyVersion
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.policy import policy_update, tenant_policy_update
from market.services.policy_proposals import policy_version_propose
from market.services.policy_versions import policy_versioned
from whatif.history import HistoryError, Window, actual_figures, history_trace, jobs_in_window
from whatif.models import WhatIfPlot, WhatIfRun, WhatIfState
from whatif.policy import (
    KNOBS,
    RUN_KEY,
    Policy,
    market_options,
    policy_check,
    proposal_snapshot,
    today_policy,
    trace_under,
)
from whatif.replay import Side, replay

# A longer window makes a replay the web page waits minutes for; export_trace has no such limit.
MAX_WINDOW = timedelta(days=31)
# Progress is written at most this often (each write is a row update the page polls).
PROGRESS_EVERY_S = 0.5


def task_limit_s() -> int:
    """Hard time limit of the replay task: three ordinary tasks' worth, inside the broker's visibility
    timeout (four), so a replay is never handed to a second worker while the first still runs it."""
    return int(settings.CELERY_TASK_MAX_S) * 3


class WhatIfError(ValueError):
    """A what-if that cannot be done as asked (a stale proposal, one applied twice); the message says why."""


def _admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may run what-if replays.")
    return actor


def _check_window(since: datetime, until: datetime, now: datetime) -> None:
    if until <= since:
        raise PolicyError("until", "must be after the start of the window")
    if since >= now:
        raise PolicyError("since", "must be in the past: a replay needs history")
    if until - since > MAX_WINDOW:
        raise PolicyError("until", f"the window may be at most {MAX_WINDOW.days} days long")


@transaction.atomic
def whatif_request(
    *,
    actor: User | None,
    since: datetime,
    until: datetime,
    proposal: Policy,
    enqueue: Callable[[int], object],
) -> WhatIfRun:
    """Check the window and the proposal, record the run and queue its replay (after commit).

    `enqueue(run_id)` queues the replay (the caller passes whatif.tasks.whatif_run.delay): the task module
    imports this one, so this one takes the task as an argument rather than importing it back.
    """
    admin = _admin(actor)
    now = timezone.now()
    _check_window(since, until, now)
    window = Window(since, min(until, now))
    if jobs_in_window(window) == 0:
        raise PolicyError(
            "since", "no jobs were submitted in this window: there is nothing to replay; pick a wider one"
        )
    try:
        trace = history_trace(window, now=now)
    except HistoryError as exc:
        raise PolicyError("since", str(exc)) from exc
    if not trace.jobs:
        raise PolicyError("since", "every job of this window ended without running: nothing to replay")
    base = today_policy()
    capacity = {p.gpu_type: p.nodes * p.gpus_per_node for p in trace.pools}
    policy_check(proposal, base=base, capacity=capacity)
    run = WhatIfRun.objects.create(
        created_by=admin, since=since, until=window.until, baseline=base, proposal=proposal
    )
    audit(
        actor=admin,
        tenant=None,
        action="whatif.request",
        detail={"run": run.pk, "since": since.isoformat(), "until": window.until.isoformat()},
    )
    transaction.on_commit(lambda: enqueue(run.pk))
    return run


def _claim(run_id: int, now: datetime) -> bool:
    """Take the run: queued, or running but older than the task's time limit (its worker died)."""
    stale = now - timedelta(seconds=task_limit_s())
    return bool(
        WhatIfRun.objects.filter(pk=run_id)
        .filter(Q(state=WhatIfState.QUEUED) | Q(state=WhatIfState.RUNNING, started_at__lt=stale))
        .update(state=WhatIfState.RUNNING, started_at=now, progress=0.0, message="")
    )


def _progress_writer(run_id: int) -> Any:
    last = [0.0]

    def write(share: float) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            WhatIfRun.objects.filter(pk=run_id, state=WhatIfState.RUNNING).update(progress=round(share, 4))

    return write


def _finish(run_id: int, **fields: Any) -> None:
    WhatIfRun.objects.filter(pk=run_id, state=WhatIfState.RUNNING).update(
        finished_at=timezone.now(), **fields
    )


def whatif_execute(*, run_id: int) -> WhatIfRun | None:
    """Replay the run's window under its baseline and its proposal and store the figures and plots.
    Does nothing for a run that is done, failed or being run by a live worker (a repeated task)."""
    if not _claim(run_id, timezone.now()):
        return WhatIfRun.objects.filter(pk=run_id).first()
    run = WhatIfRun.objects.get(pk=run_id)
    try:
        trace = history_trace(Window(run.since, run.until))
        if not trace.jobs:
            _finish(run_id, state=WhatIfState.DONE, progress=1.0, message="No jobs in this window.")
            return WhatIfRun.objects.get(pk=run_id)
        today, proposal = (
            Side(trace_under(trace, p), market_options(p)) for p in (run.baseline, run.proposal)
        )
        outcome = replay(today, proposal, _progress_writer(run_id))
    except HistoryError as exc:
        _finish(run_id, state=WhatIfState.FAILED, message=str(exc)[:500])
        return WhatIfRun.objects.get(pk=run_id)
    result = {
        "summaries": outcome.summaries,
        "actual": actual_figures(Window(run.since, run.until)),
        "notes": list(trace.notes),
    }
    with transaction.atomic():
        WhatIfPlot.objects.filter(run_id=run_id).delete()
        WhatIfPlot.objects.bulk_create(
            WhatIfPlot(run_id=run_id, name=n, png=png) for n, png in outcome.plots.items()
        )
        _finish(run_id, state=WhatIfState.DONE, progress=1.0, result=result)
    return WhatIfRun.objects.get(pk=run_id)


def whatif_fail(*, run_id: int, message: str) -> None:
    """The task's last word when the replay raised or ran out of time: the page shows `message`."""
    _finish(run_id, state=WhatIfState.FAILED, message=message[:500])


# ---- applying a proposal --------------------------------------------------------------------------------


def _stale_fields(run: WhatIfRun, now: Policy) -> list[str]:
    """What changed in the platform's policy since the run read it (its figures compare against that)."""
    base = run.baseline
    # A knob the run's baseline does not name (stored before the knob existed) was not compared: not stale.
    changed = [k for k in (*KNOBS, "fair_reclaim", "types") if k in base and base[k] != now.get(k)]
    changed += [
        f"tenant {slug}"
        for slug in sorted(set(base["tenants"]) | set(now["tenants"]))
        if base["tenants"].get(slug) != now["tenants"].get(slug)
    ]
    return changed


def _apply_types(admin: User, proposal: Policy, base: Policy) -> None:
    for t in GpuType.objects.filter(name__in=list(proposal["types"])).order_by("name"):
        new = proposal["types"][t.name]
        if new != base["types"][t.name]:
            gpu_type_policy_save(
                name=t.name,
                memory_gb=t.memory_gb,
                reserve_price=new["reserve"],
                max_price=new["max"],
                actor=admin,
            )


def _apply_tenants(admin: User, proposal: Policy, base: Policy) -> None:
    """Weights and guarantees, lowered guarantees first: guarantee_set keeps each type's sum within the
    cluster at every step, so raising one tenant's before lowering another's could be refused."""
    tenants = Tenant.objects.in_bulk(list(proposal["tenants"]), field_name="slug")
    for lowering in (True, False):
        for slug in sorted(proposal["tenants"]):
            new, old = proposal["tenants"][slug], base["tenants"][slug]
            types = set(new["guarantees"]) | set(old["guarantees"])
            step = {
                k: new["guarantees"].get(k, 0)
                for k in types
                if (new["guarantees"].get(k, 0) < old["guarantees"].get(k, 0)) == lowering
                and new["guarantees"].get(k, 0) != old["guarantees"].get(k, 0)
            }
            weight = new["weight"] if lowering and new["weight"] != old["weight"] else None
            if step or weight is not None:
                tenant_policy_update(actor=admin, tenant=tenants[slug], weight=weight, guarantees=step)


@transaction.atomic
def whatif_apply(*, actor: User | None, run_id: int, reason: str = "") -> None:
    """Make the run's proposal the platform's policy, once. WhatIfError when the run is not done, was applied already, or the policy
    changed since the run read it (its figures would no longer compare today with the proposal)."""
    admin = _admin(actor)
    run = WhatIfRun.objects.select_for_update(no_key=True).filter(pk=run_id).first()
    if run is None:
        raise WhatIfError("no such what-if run")
    if run.state != WhatIfState.DONE or run.result is None:
        raise WhatIfError("only a finished what-if can be applied")
    if run.applied_at is not None:
        raise WhatIfError(f"this proposal was applied already, at {run.applied_at:%Y-%m-%d %H:%M} UTC")
    stale = _stale_fields(run, today_policy())
    if stale:
        raise WhatIfError(
            "the policy changed since this what-if ran (" + ", ".join(stale) + "); run it again to compare"
        )
    proposal, base = run.proposal, run.baseline
    knobs: dict[str, Any] = {k: proposal[k] for k in KNOBS if k in proposal and proposal[k] != base.get(k)}
    if proposal["fair_reclaim"] != base["fair_reclaim"]:
        knobs["fair_reclaim"] = int(proposal["fair_reclaim"])  # the policy stores the switch as 0 or 1
    # One policy version for the whole proposal, however many writers it takes (docs/policy.md §Versions).
    with policy_versioned(actor=admin, reason=reason or f"what-if run {run.pk} applied"):
        if knobs:
            policy_update(actor=admin, **knobs)
        _apply_types(admin, proposal, base)
        _apply_tenants(admin, proposal, base)
    run.applied_at, run.applied_by = timezone.now(), admin
    run.save(update_fields=["applied_at", "applied_by"])
    audit(actor=admin, tenant=None, action="whatif.apply", detail={"run": run.pk})


# ---- a proposal as a proposed policy version ------------------------------------------------------------


def whatif_propose(*, actor: User | None, run_id: int, reason: str, key: str | None = None) -> PolicyVersion:
    """Record the run's proposal as a proposed policy version (docs/policy.md §Versions), the step after the
    replay: it can then run in shadow and as a canary. The proposal is laid over the policy in force and
    checked whole by policy_version_propose, so a tenant or GPU type gone since the run is refused there,
    naming it. Unlike an apply, a policy changed since the run is no reason to refuse: nothing takes effect.
    `key` (the console form's nonce): a resent form makes one version."""
    admin = _admin(actor)
    run = WhatIfRun.objects.filter(pk=run_id).first()
    if run is None:
        raise WhatIfError("no such what-if run")
    if run.state != WhatIfState.DONE:
        raise WhatIfError("only a finished what-if can be saved as a proposed version")
    return policy_version_propose(
        actor=admin,
        snapshot=proposal_snapshot(run.proposal),
        reason=reason,
        detail={RUN_KEY: run.pk},
        key=key,
    )
