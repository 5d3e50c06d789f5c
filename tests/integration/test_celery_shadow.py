"""A real Celery worker clears a round with a proposed version in shadow (docs/rounds.md §Shadow rounds): the
round commits exactly what the allocator decides for the frozen book under the live policy, and the shadow
leaves one ShadowRound row and nothing else."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from accounts.models import AuditEvent
from allocator import clear
from market.models import Hold, Lease, Round, RoundState, ShadowRound
from market.selectors.book import Snapshot
from market.selectors.shadow_book import book_under
from market.services.shadow import shadow_start
from tests.market.shadow_helpers import contended, propose
from tests.round_holds import decided_holds
from tests.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_runs_a_shadow_round_that_commits_nothing(world, worker_queue):
    from market.tasks import round_tick

    contended(world)
    version = propose(world, weights={"alpha": 10})
    shadow_start(actor=world.admin, version=version)
    audit_before = set(AuditEvent.objects.values_list("pk", flat=True))

    round_tick.apply_async(queue=worker_queue)
    rnd = wait_for(
        lambda: Round.objects.filter(state__in=[RoundState.DISPATCHED, RoundState.FAILED]).first(),
        90,
        "the worker finishing a round",
    )
    assert rnd.state == RoundState.DISPATCHED, rnd.error
    row = wait_for(
        lambda: ShadowRound.objects.filter(version=version, round=rnd).first(), 30, "the shadow round"
    )

    book = Snapshot.load(bytes(rnd.book)).book
    live, proposed = clear(book), clear(book_under(book, version.snapshot))
    # What was committed is the live decision, to the hold: not the proposal's.
    decided = decided_holds(rnd.pk, live)
    assert dict(Hold.objects.values_list("key", "amount")) == decided
    won = {t: sum(1 for w in live.winner_records() if w.tenant == t) for t in ("alpha", "beta")}
    assert {t: Lease.objects.filter(tenant__slug=t).count() for t in won} == won
    shadow_won = sum(1 for w in proposed.winner_records() if w.tenant == "alpha")
    assert shadow_won > won["alpha"]
    # The stored shadow says the same, and the round's only new audit row is its commit.
    assert row.tenants["alpha"]["won_live"] == won["alpha"]
    assert row.tenants["alpha"]["won_proposed"] == shadow_won
    assert row.gained == shadow_won - won["alpha"]
    new_audit = AuditEvent.objects.exclude(pk__in=audit_before).values_list("action", flat=True)
    assert list(new_audit) == ["round.commit"]
    call_command("ledger_check", stdout=StringIO())
    call_command("orphan_check", stdout=StringIO())
