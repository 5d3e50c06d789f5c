"""Retention: books, outcomes and commands older than the policy's period go; summaries, money and each job's
newest outcome stay; a round still in progress is never touched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from market.models import BidOutcome, Command, CommandState, Lease, Round, RoundPrice, RoundState
from market.selectors.policy import market_policy
from market.services.jobs import bid_amend
from market.services.retention import retention_prune
from market.services.rounds import round_advance, slot_of
from tests.conftest import World
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


def _run_round(days_ago: float) -> Round:
    slot = slot_of(timezone.now() - timedelta(days=days_ago), 300)
    rnd = Round.objects.create(slot=slot, period_s=300)
    done = round_advance(round_id=rnd.pk)
    assert done.state == "dispatched", done.error
    return done


def test_old_books_outcomes_and_commands_go_summaries_stay(world: World) -> None:
    policy = market_policy()
    policy.retention_days = 7
    policy.save()
    world.nodes(world.h100, 1, size=2)
    world.fund(world.alpha, 100)
    winner = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 3})
    loser = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 3})
    # An amended bid is a changed outcome: each round writes the loser a row (an unchanged loss would not).
    old1 = _run_round(10)
    bid_amend(job=loser, actor=world.alice, bids=[(world.h100, 4)])
    old2 = _run_round(9)
    bid_amend(job=loser, actor=world.alice, bids=[(world.h100, 5)])
    recent = _run_round(1)
    assert BidOutcome.objects.filter(job=loser).count() == 3
    Command.objects.update(state=CommandState.ACKED, acked_at=timezone.now() - timedelta(days=9))
    leases = Lease.objects.count()

    stats = retention_prune(batch=1)  # one row per transaction: the batching loop is exercised too

    assert (stats.books, stats.outcomes, stats.commands) == (2, 2, 1)
    assert Round.objects.filter(book__isnull=True).count() == 2
    assert Round.objects.get(pk=recent.pk).book
    # The loser keeps its newest outcome (the recent round's), the winner its only one (it won the first).
    assert list(BidOutcome.objects.filter(job=loser).values_list("round_id", flat=True)) == [recent.pk]
    assert BidOutcome.objects.filter(job=winner, round=old1).exists()
    assert Command.objects.count() == 0 and Lease.objects.count() == leases
    assert RoundPrice.objects.filter(round__in=[old1, old2]).count() == 4  # two rounds, two types
    assert Round.objects.get(pk=old1.pk).winners == 1
    again = retention_prune()
    assert (again.books, again.outcomes, again.commands) == (0, 0, 0)


def test_a_round_in_progress_keeps_its_book(world: World) -> None:
    world.nodes(world.h100, 1, size=2)
    make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 3})
    rnd = Round.objects.create(slot=slot_of(timezone.now() - timedelta(days=60), 300), period_s=300)
    round_advance(round_id=rnd.pk, stop_after=RoundState.FROZEN)
    assert retention_prune().books == 0
    assert Round.objects.get(pk=rnd.pk).book is not None


def test_the_period_is_a_policy_knob(world: World) -> None:
    admin = world.client(world.admin)
    response = admin.patch("/api/v1/policy", {"retention_days": 90}, format="json")
    assert response.status_code == 200 and response.json()["retention_days"] == 90
    bad = admin.patch("/api/v1/policy", {"retention_days": 0}, format="json")
    assert bad.status_code == 400 and "retention_days" in bad.json()["fields"]
