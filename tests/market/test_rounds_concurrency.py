"""Exactly once on PostgreSQL: racing workers, each with its own connection, commit a round once."""

from __future__ import annotations

import pytest
from django.utils import timezone

from market.models import BidOutcome, Command, Hold, Lease, Round, RoundState
from market.selectors.ledger import ledger_problems
from market.services import rounds
from tests.concurrency import run_together
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def busy_market(world):
    world.nodes(world.h100, 4, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 10_000)
    for i in range(60):
        tenant, user = [(world.alpha, world.alice), (world.beta, world.bob), (world.gamma, world.carl)][i % 3]
        make_job(tenant, user, gpus=1 + i % 4, limits={world.h100: 2.5 + (i % 7) / 2}, name=f"j{i}")
    return world


def test_racing_ticks_commit_one_round(busy_market):
    results = run_together(lambda i: rounds.round_tick(), n=6)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert Round.objects.count() == 1
    rnd = Round.objects.get()
    assert rnd.state == RoundState.DISPATCHED and rnd.winners > 0
    assert Lease.objects.count() == rnd.winners
    # One hold per tenant with winners, held once however many workers raced.
    assert Hold.objects.count() == Lease.objects.values("tenant").distinct().count()
    assert set(Hold.objects.values_list("key", flat=True)) == set(
        Lease.objects.values_list("hold_key", flat=True)
    )
    assert BidOutcome.objects.count() == 60
    assert Command.objects.filter(kind="bind").count() >= rnd.winners
    assert ledger_problems() == []


def test_racing_advances_of_one_round_commit_once(busy_market):
    rnd = Round.objects.create(slot=rounds.slot_of(timezone.now(), 300), period_s=300)
    results = run_together(lambda i: rounds.round_advance(round_id=rnd.pk), n=6)
    assert not [r for r in results if isinstance(r, Exception)], results
    # A worker that found the round locked leaves early; one more pass finishes whatever is left.
    done = rounds.round_advance(round_id=rnd.pk)
    assert done.state == RoundState.DISPATCHED
    assert Lease.objects.count() == done.winners
    # One hold per tenant with winners, held once however many workers raced.
    assert Hold.objects.count() == Lease.objects.values("tenant").distinct().count()
    assert set(Hold.objects.values_list("key", flat=True)) == set(
        Lease.objects.values_list("hold_key", flat=True)
    )
    assert BidOutcome.objects.count() == 60
    assert ledger_problems() == []
