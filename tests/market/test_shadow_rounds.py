"""Shadow rounds in the round pipeline (market.services.shadow, docs/rounds.md §Shadow rounds): each live
round is cleared again under every version in shadow after its commit; only the ShadowRound row is written, a
failing shadow does not fail the round, and admins start and stop shadows (audited, at most SHADOW_MAX)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from accounts.models import AuditEvent
from config.errors import PolicyError
from config.metrics import SHADOW_ROUNDS
from market.models import (
    Account,
    BidOutcome,
    Command,
    FairShareRound,
    FairShareUsage,
    Hold,
    Job,
    JournalEntry,
    Lease,
    LeaseGpu,
    Posting,
    Round,
    RoundPrice,
    ShadowRound,
    ShadowRun,
)
from market.selectors.shadow import shadow_totals
from market.selectors.shadow_diff import SUMMARY_KEYS
from market.services import shadow as shadow_service
from market.services.retention import retention_prune
from market.services.rounds import round_advance, slot_of
from market.services.shadow import SHADOW_MAX, shadow_start, shadow_stop
from tests.conftest import World
from tests.market.shadow_helpers import contended, propose

pytestmark = pytest.mark.django_db


def _round(days_ago: float = 0) -> Round:
    rnd = Round.objects.create(slot=slot_of(timezone.now() - timedelta(days=days_ago), 300), period_s=300)
    done = round_advance(round_id=rnd.pk)
    assert done.state == "dispatched", done.error
    return done


def _rows(rows: Any) -> list[str]:
    return sorted(map(repr, rows))


def _trace() -> dict[str, Any]:
    """What a round commits, without ids that differ between two runs (sequences do not roll back)."""
    return {
        "leases": _rows(
            Lease.objects.values_list("job__name", "job__tenant__slug", "tier", "price", "state")
        ),
        "lease_gpus": LeaseGpu.objects.count(),
        "jobs": _rows(Job.objects.values_list("tenant__slug", "state")),
        "holds": _rows(Hold.objects.values_list("tenant__slug", "amount", "state")),
        "accounts": _rows(Account.objects.values_list("tenant__slug", "kind", "balance")),
        "entries": JournalEntry.objects.count(),
        "postings": Posting.objects.count(),
        "commands": _rows(Command.objects.values_list("kind", "state")),
        "outcomes": _rows(BidOutcome.objects.values_list("job__tenant__slug", "won", "reason")),
        "prices": _rows(RoundPrice.objects.values_list("gpu_type__name", "posted", "next_posted")),
        "fair_share": _rows(
            FairShareUsage.objects.values_list("tenant__slug", "gpu_type__name", "owed_gpu_hours")
        ),
        "fair_share_rounds": FairShareRound.objects.count(),
        "audit": _rows(
            AuditEvent.objects.exclude(action__startswith="shadow.").values_list("action", flat=True)
        ),
    }


def test_a_round_in_shadow_stores_the_difference_and_commits_only_the_live_result(world: World) -> None:
    contended(world)
    version = propose(world, weights={"alpha": 10})
    # The same round without a shadow, rolled back: what the live round commits.
    with transaction.atomic():
        _round()
        without = _trace()
        transaction.set_rollback(True)
    shadow_start(actor=world.admin, version=version)

    rnd = _round()

    assert _trace() == without
    row = ShadowRound.objects.get(version=version, round=rnd)
    assert row.winners_live == row.winners_proposed == 8  # the node is full either way
    assert row.gained > 0 and row.gained == row.lost
    alpha, beta = row.tenants["alpha"], row.tenants["beta"]
    assert (
        alpha["gained"] == row.gained and alpha["lost"] == 0 and alpha["gpus_proposed"] > alpha["gpus_live"]
    )
    assert beta["lost"] == row.lost and beta["gpus_proposed"] < beta["gpus_live"]
    assert "gamma" not in row.tenants  # nothing differs for a tenant with no bids
    assert set(row.prices) == {"H100", "A100"}
    totals = shadow_totals(version=version)
    assert totals.summary["rounds"] == 1 and totals.summary["gained"] == row.gained
    assert totals.tenants["alpha"]["gained"] == row.gained


def test_a_failing_shadow_does_not_fail_the_live_round(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    contended(world)
    broken, working = propose(world, weights={"alpha": 10}), propose(world, min_runtime_s=60)
    shadow_start(actor=world.admin, version=broken)
    shadow_start(actor=world.admin, version=working)
    real = shadow_service.shadow_round  # type: ignore[attr-defined]  # the name the service calls, patched below

    def fails_for_broken(book: Any, result: Any, proposal: Any) -> Any:
        if proposal == broken.snapshot:
            raise RuntimeError("shadow exploded")
        return real(book, result, proposal)

    monkeypatch.setattr(shadow_service, "shadow_round", fails_for_broken)
    failed_before = SHADOW_ROUNDS.labels("failed")._value.get()

    rnd = _round()

    assert rnd.winners == 8 and Lease.objects.count() == 8
    assert not ShadowRound.objects.filter(version=broken).exists()
    assert ShadowRound.objects.filter(version=working, round=rnd).exists()  # the next version still ran
    assert SHADOW_ROUNDS.labels("failed")._value.get() == failed_before + 1


def test_a_shadow_that_cannot_even_read_its_versions_leaves_the_round_alone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    contended(world)

    def broken(*, limit: int) -> Any:
        raise RuntimeError("database gone")

    monkeypatch.setattr(shadow_service, "shadow_versions", broken)
    assert _round().winners == 8


def test_admins_start_and_stop_shadows_audited_and_capped(world: World) -> None:
    versions = [propose(world, min_runtime_s=60 + i) for i in range(SHADOW_MAX + 1)]
    with pytest.raises(PermissionDenied):
        shadow_start(actor=world.alice, version=versions[0])
    for version in versions[:SHADOW_MAX]:
        shadow_start(actor=world.admin, version=version)
    with pytest.raises(PolicyError, match="already runs"):
        shadow_start(actor=world.admin, version=versions[0])
    with pytest.raises(PolicyError, match=f"at most {SHADOW_MAX}"):
        shadow_start(actor=world.admin, version=versions[-1])
    shadow_stop(actor=world.admin, version=versions[0])
    shadow_start(actor=world.admin, version=versions[-1])
    with pytest.raises(PolicyError, match="does not run"):
        shadow_stop(actor=world.admin, version=versions[0])
    versions[1].status = "applied"
    versions[1].save(update_fields=["status"])
    with pytest.raises(PolicyError, match="only a proposed"):
        shadow_start(actor=world.admin, version=versions[1])
    # versions[1], applied, no longer takes one of the SHADOW_MAX slots: another proposal may start.
    shadow_start(actor=world.admin, version=versions[0])
    actions = list(AuditEvent.objects.filter(action__startswith="shadow.").values_list("action", "detail"))
    assert [a for a, _d in actions].count("shadow.start") == SHADOW_MAX + 2
    first_run = ShadowRun.objects.filter(version=versions[0]).order_by("pk").first()
    assert first_run is not None
    assert ("shadow.stop", {"version": versions[0].number, "run": first_run.pk}) in actions
    # A version no longer proposed (applied) does not run in shadow even while its run is open.
    contended(world)
    rnd = _round()
    assert set(ShadowRound.objects.filter(round=rnd).values_list("version", flat=True)) == {
        versions[0].pk,
        versions[2].pk,
        versions[3].pk,
    }


def test_retention_prunes_old_shadow_rounds_with_the_rounds_detail(world: World) -> None:
    contended(world)
    version = propose(world, weights={"alpha": 10})
    shadow_start(actor=world.admin, version=version)
    old, recent = _round(days_ago=40), _round()
    assert ShadowRound.objects.filter(version=version).count() == 2

    stats = retention_prune(batch=1)

    assert stats.shadow_rounds == 1
    assert list(ShadowRound.objects.values_list("round", flat=True)) == [recent.pk]
    assert Round.objects.filter(pk=old.pk).exists()
    assert retention_prune().shadow_rounds == 0


def test_the_models_summary_columns_are_the_comparisons_keys() -> None:
    columns = {f.name for f in ShadowRound._meta.get_fields()}
    assert set(SUMMARY_KEYS) <= columns
    assert columns - set(SUMMARY_KEYS) == {
        "id",
        "version",
        "round",
        "created_at",
        "clear_ms",
        "prices",
        "tenants",
    }


def test_shadow_replay_clears_kept_books_under_a_version_and_writes_nothing(world: World) -> None:
    import json
    from io import StringIO

    from django.core.management import CommandError, call_command

    contended(world)
    _round()
    version = propose(world, weights={"alpha": 10})
    out = StringIO()
    call_command("shadow_replay", str(version.number), stdout=out)
    replay = json.loads(out.getvalue())
    assert replay["summary"]["rounds"] == 1 and replay["summary"]["gained"] > 0
    assert replay["tenants"]["alpha"]["gained"] == replay["summary"]["gained"]
    assert not ShadowRound.objects.exists()
    with pytest.raises(CommandError, match="no policy version"):
        call_command("shadow_replay", "999")
