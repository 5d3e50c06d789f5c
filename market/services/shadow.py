"""Shadow rounds (docs/rounds.md §Shadow rounds): start and stop a proposed version's shadow, and clear each
live round once more under every version in shadow.

`shadow_rounds_run` is called by the round pipeline after the live round is committed and dispatched, in the
same Celery task, from the book and result the task still holds in memory: the live round's leases, holds,
commands and prices are in the database before any shadow starts, so a shadow can neither delay nor fail them.
It never raises; a version whose shadow fails is logged and counted (`gpumarket_shadow_rounds{outcome=
"failed"}`) and the next version still runs. Nothing but the ShadowRound row is written.
"""

from __future__ import annotations

import logging
import time

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.audit import audit
from accounts.models import User
from allocator import Book, Result
from config.errors import PolicyError
from config.metrics import SHADOW_ROUNDS
from market.models import PolicyVersion, Round, ShadowRound, ShadowRun
from market.selectors.shadow import SHADOW_STATUS, shadow_proposal, shadow_versions
from market.selectors.shadow_diff import SUMMARY_KEYS, ShadowDiff, shadow_round
from market.services.policy_versions import lock_policy

log = logging.getLogger(__name__)

# At most this many versions run in shadow at once: each costs one more clearing per round, after the live
# one (bench/round.py --shadow measures one).
SHADOW_MAX = 3


def _admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise PermissionDenied("Only platform admins may run policy versions in shadow.")
    return actor


def shadow_start(*, actor: User, version: PolicyVersion) -> ShadowRun:
    """Run a proposed version in shadow from the next round on. Refused (PolicyError, 400) for a version that
    is not proposed, already in shadow, or when SHADOW_MAX versions already are."""
    _admin(actor)
    with transaction.atomic():
        # The policy lock serialises starts, so two admins cannot both start the last allowed shadow.
        lock_policy()
        version.refresh_from_db(fields=["status"])  # applied since the caller read it?
        if version.status != SHADOW_STATUS:
            raise PolicyError(
                "version", f"only a {SHADOW_STATUS} version runs in shadow (this one is {version.status})"
            )
        open_runs = ShadowRun.objects.filter(stopped_at__isnull=True)
        if open_runs.filter(version=version).exists():
            raise PolicyError("version", "this version already runs in shadow")
        # A run left open on a version applied since is not shadowed (shadow_versions), so it takes no slot.
        if open_runs.filter(version__status=SHADOW_STATUS).count() >= SHADOW_MAX:
            raise PolicyError(
                "version", f"at most {SHADOW_MAX} versions run in shadow at once: stop one first"
            )
        run = ShadowRun.objects.create(version=version, started_by=actor)
        audit(
            actor=actor, tenant=None, action="shadow.start", detail={"version": version.number, "run": run.pk}
        )
    return run


def shadow_stop(*, actor: User, version: PolicyVersion) -> ShadowRun:
    """Stop a version's shadow; its shadow rounds stay until retention prunes them."""
    _admin(actor)
    with transaction.atomic():
        run = (
            ShadowRun.objects.select_for_update(no_key=True)
            .filter(version=version, stopped_at__isnull=True)
            .first()
        )
        if run is None:
            raise PolicyError("version", "this version does not run in shadow")
        run.stopped_at, run.stopped_by = timezone.now(), actor
        run.save(update_fields=["stopped_at", "stopped_by"])
        audit(
            actor=actor, tenant=None, action="shadow.stop", detail={"version": version.number, "run": run.pk}
        )
    return run


def shadow_rounds_run(*, rnd: Round, book: Book, result: Result) -> int:
    """Clear the committed round's book under every version in shadow and store what differs; returns how many
    were stored. Never raises (see the module's docstring)."""
    try:
        versions = shadow_versions(limit=SHADOW_MAX)
    except Exception:
        log.exception("round %s: shadow versions could not be read", rnd.pk)
        SHADOW_ROUNDS.labels("failed").inc()
        return 0
    stored = 0
    for version in versions:
        started = time.perf_counter()
        try:
            diff = shadow_round(book, result, shadow_proposal(version))
            stored += _store(rnd, version, diff)
        except Exception:
            log.exception("round %s: shadow of version %s failed", rnd.pk, version.pk)
            SHADOW_ROUNDS.labels("failed").inc()
            continue
        SHADOW_ROUNDS.labels("stored").inc()
        log.info(
            "round %s: shadow of version %s",
            rnd.pk,
            version.pk,
            extra={
                "version": version.pk,
                "gained": diff.summary["gained"],
                "lost": diff.summary["lost"],
                "ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
    return stored


def _store(rnd: Round, version: PolicyVersion, diff: ShadowDiff) -> int:
    try:
        with transaction.atomic():
            ShadowRound.objects.create(
                version=version,
                round=rnd,
                clear_ms=diff.clear_ms,
                prices=diff.prices,
                tenants=diff.tenants,
                **{key: diff.summary[key] for key in SUMMARY_KEYS},
            )
    except IntegrityError:  # a repeated run of the same round (a retried task): the first one stays
        return 0
    return 1
