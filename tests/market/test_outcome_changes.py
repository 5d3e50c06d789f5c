"""An outcome row only when a bid's outcome changed (docs/rounds.md §At fleet scale, writing less).

A loser's row is written when its bid version, GPU type, reason or figure differs from its job's newest row, or
when the job was left out of a round since that row (its wait mark moved past it); wins and winners skipped at
commit always are. The readers answer as they did with a row per round: the job's sentence names the newest
round the loss stands for and that round's facts, rounds waited count every round, the console lists every
loser of a round, the fair-share diagnosis counts every loss.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from market.models import BidOutcome, Job, Round, RoundLoss
from market.models.rounds import BUSY, use_key
from market.selectors.explain import explain_outcomes
from market.selectors.market_stats import round_figures
from market.selectors.policy import market_policy
from market.services import rounds
from market.services.guarantees import guarantee_set
from market.services.jobs import bid_amend
from tests.conftest import World
from tests.frontend.conftest import login
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


def _round() -> Round:
    """The next round (one period after the last), advanced through its steps."""
    slot = timezone.now() + timedelta(days=Round.objects.count())
    rnd = Round.objects.create(slot=rounds.slot_of(slot, 300), period_s=300)
    done = rounds.round_advance(round_id=rnd.pk)
    assert done.state == "dispatched", done.error
    return done


def _busy(w: World) -> tuple[Job, Job]:
    """One node of 8 H100s, all alpha's by guarantee (its 8-GPU job wins them in round one); beta's 2-GPU bid
    above the posted price finds none left for spot, round after round: busy, the same way each time."""
    w.nodes(w.h100, 1, size=8)
    for tenant in (w.alpha, w.beta):
        w.fund(tenant, 1000)
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    mine = make_job(w.alpha, w.amy, gpus=8, limits={w.h100: 3}, name="alpha-8", age_s=10)
    theirs = make_job(w.beta, w.bea, gpus=2, limits={w.h100: 10}, name="beta-2")
    return mine, theirs


def _explain(job: Job) -> list[str]:
    job.refresh_from_db()
    rows = BidOutcome.objects.filter(job=job).select_related("gpu_type").order_by("-round_id")
    return [e.sentence for e in explain_outcomes(job, rows, list(job.bids.all()))]


def test_three_rounds_lost_the_same_way_write_one_row_and_the_page_names_the_latest(world: World) -> None:
    w = world
    mine, waiting = _busy(w)
    first, second, third = _round(), _round(), _round()
    assert first.winners == 1
    rows = list(BidOutcome.objects.filter(job=waiting).values_list("round_id", "won", "reason"))
    assert rows == [(first.pk, False, BUSY)]
    # The rounds after the first wrote no outcome row at all (the winner is allocated, the loser unchanged),
    # and each still counted the loss for the fair-share diagnosis.
    assert [third.counters["outcomes_written"], second.counters["outcomes_written"]] == [0, 0]
    assert first.counters["outcomes_written"] == 2
    assert list(RoundLoss.objects.filter(tenant=w.beta).values_list("round_id", "reason", "bids")) == sorted(
        [(r.pk, BUSY, 1) for r in (first, second, third)]
    )
    # The sentence reads as a row per round would have: the latest round, and its figures.
    assert third.counters[use_key("G", "H100")] == 8
    expected = (
        f"Waiting for free H100 GPUs: in round {third.pk} none was left for spot bids: after it, 8 H100 GPUs were "
        "in use (8 guaranteed, 0 borrowed, 0 spot). No higher bid took its place, so a higher limit would not "
        "have helped; it stays queued and can win when running H100 jobs end and free 2 GPUs."
    )
    assert _explain(waiting) == [expected]
    api = w.client(w.bea).get(f"/api/v1/tenants/beta/jobs/{waiting.pk}")
    assert api.status_code == 200
    [out] = api.json()["outcomes"]
    assert out["text"] == expected
    page = login(Client(), w.bea).get(f"/t/beta/jobs/{waiting.pk}/")
    assert (
        page.status_code == 200
        and f"in round {third.pk} none was left for spot bids" in page.content.decode()
    )
    # The console's round page still lists the loser of the third round, from the row that stood for it.
    console = login(Client(), w.admin).get(f"/console/rounds/{third.pk}/")
    assert console.status_code == 200
    html = console.content.decode()
    assert f"<td>{waiting.pk}</td><td>beta</td><td>H100</td><td>busy" in html
    assert f"unchanged since round {first.pk}" in html
    # Demand and won GPUs per round, as the rows used to sum them.
    figures = round_figures()
    assert [(f.demand_gpus, f.won_gpus) for f in figures] == [(10, 8), (2, 0), (2, 0)]
    assert mine.pk not in {o.job_id for o in BidOutcome.objects.filter(round__in=[second, third])}


def test_an_amended_bid_writes_a_row_and_the_next_unchanged_round_none(world: World) -> None:
    w = world
    _, waiting = _busy(w)
    first = _round()
    bid_amend(job=waiting, actor=w.bea, bids=[(w.h100, 12)])
    second, third = _round(), _round()
    got = list(
        BidOutcome.objects.filter(job=waiting).order_by("round_id").values_list("round_id", "bid_version")
    )
    assert got == [(first.pk, 1), (second.pk, 2)]
    assert third.counters["outcomes_written"] == 0


def test_a_changed_figure_writes_a_row_and_rounds_waited_count_every_round(world: World) -> None:
    """A gang no node fits: its rows are written only where the figure (the largest gang still placeable)
    changed, and its sentence counts every round it waited, rows or not."""
    w = world
    w.nodes(w.h100, 1, size=8)
    for tenant in (w.alpha, w.beta):
        w.fund(tenant, 1000)
    policy = market_policy()
    policy.starve_rounds = 50
    policy.save()
    make_job(w.alpha, w.amy, gpus=4, limits={w.h100: 9}, age_s=10)
    assert _round().winners == 1  # half the node is the small job's
    gang = make_job(w.beta, w.bea, gpus=8, limits={w.h100: 9})
    first = _round()
    [row] = BidOutcome.objects.filter(job=gang)
    assert (row.round_id, row.reason, row.figure) == (first.pk, "no_node_fits", 4)
    for _ in range(4):
        _round()
    rows = list(BidOutcome.objects.filter(job=gang).order_by("round_id").values_list("reason", "figure"))
    assert all(reason == "no_node_fits" for reason, _f in rows) and len(rows) < 5
    assert all(a != b for a, b in zip(rows, rows[1:], strict=False))  # each row says something new
    newest = _explain(gang)[0]
    assert newest.endswith(f"nodes are reserved for it in {policy.starve_rounds - 5} more rounds.")
    # An amended bid is a new outcome whatever the reason.
    bid_amend(job=gang, actor=w.bea, bids=[(w.h100, 10)])
    last = _round()
    assert BidOutcome.objects.filter(job=gang, round=last, bid_version=2).exists()


def test_a_job_left_out_of_a_round_gets_its_row_written_again(world: World) -> None:
    """An unchanged row stands only for rounds the job was in: a round that left it out (its tenant inactive)
    moves its wait mark past the row, and the next round it is in writes the same outcome again."""
    w = world
    _, waiting = _busy(w)
    first = _round()
    w.beta.active = False
    w.beta.save(update_fields=["active"])
    _round()
    w.beta.active = True
    w.beta.save(update_fields=["active"])
    third, fourth = _round(), _round()
    got = list(BidOutcome.objects.filter(job=waiting).order_by("round_id").values_list("round_id", "reason"))
    assert got == [(first.pk, BUSY), (third.pk, BUSY)]
    assert fourth.counters["outcomes_written"] == 0
    # The newest row stands for the rounds since it, the job in each.
    newest = _explain(waiting)[0]
    assert f"in round {fourth.pk} none" in newest
