"""Every waiting job's sentence names the real cause with the round's own evidence (docs/allocator.md, reasons):
when tiers G and B took every GPU of a type, a losing bid is `busy` (not `outbid` with no figure), and its
sentence says the GPUs are in use, by whom, with no price that "would have won"; no sentence ever shows a
placeholder for a figure the round did not store."""

from __future__ import annotations

import itertools

import pytest
from django.test import Client
from django.utils import timezone

from allocator import REASON_NAMES
from market.models import BidOutcome, Job, Round, RoundPrice
from market.models.rounds import (
    BUSY,
    SKIP_BUDGET,
    SKIP_CHANGED,
    SKIP_GPUS_TAKEN,
    SKIP_HOLD_CONFLICT,
    SKIP_UNAVAILABLE,
    SKIP_UNCONFINED,
    use_key,
)
from market.selectors.explain import TypeUse, _sentence, explain_outcomes
from market.services import rounds
from market.services.guarantees import guarantee_set
from tests.conftest import World
from tests.frontend.conftest import login
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db

EVERY_REASON = [
    *REASON_NAMES.values(),
    SKIP_CHANGED,
    SKIP_GPUS_TAKEN,
    SKIP_BUDGET,
    SKIP_HOLD_CONFLICT,
    SKIP_UNAVAILABLE,
    SKIP_UNCONFINED,
    "",
    "some_future_reason",
]


def test_no_sentence_ever_shows_a_placeholder_for_a_missing_figure(world: World) -> None:
    """A property over every reason code and every combination of missing evidence: the figure (null, -1, 0
    or set), the limit of the bid version, the round's price row (absent, no spot price, a spot price), the
    busy evidence, the GPU type (gone) and the price of a win."""
    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 2.2})
    rnd = Round.objects.create(slot=timezone.now(), period_s=60)
    prices = [
        None,
        RoundPrice(
            round=rnd, gpu_type=world.h100, reserve=2_000_000, posted=3_000_000, spot=None, next_posted=1
        ),
        RoundPrice(
            round=rnd, gpu_type=world.h100, reserve=2_000_000, posted=3_000_000, spot=2_400_000, next_posted=1
        ),
    ]
    uses = [None, TypeUse(guaranteed=6, borrowed=2, spot=0, free=0), TypeUse(4, 2, 1, 1)]
    cases = itertools.product(
        EVERY_REASON, [None, -1, 0, 2_500_000], [None, 2_400_000], prices, uses, [None, world.h100]
    )
    seen = 0
    for reason, figure, limit, price, use, gpu_type in cases:
        o = BidOutcome(
            round=rnd, job=job, bid_version=1, won=False, reason=reason, figure=figure, gpu_type=gpu_type
        )
        text = _sentence(job, o, price, limit, 1, use)
        assert text and "?" not in text and "None" not in text and "-1" not in text, (
            reason,
            figure,
            limit,
            text,
        )
        seen += 1
    for price_micro in (None, 2_100_000):
        won = BidOutcome(
            round=rnd, job=job, bid_version=1, won=True, tier="S", price=price_micro, gpu_type=world.h100
        )
        text = _sentence(job, won, None, None, 0)
        assert text.startswith("Won 2 H100 GPUs in tier S (spot)") and "?" not in text and "None" not in text
    assert seen == len(EVERY_REASON) * 4 * 2 * 3 * 3 * 2


def _busy_round(w: World) -> tuple[Job, Job, Round]:
    """One node of 8 H100s. alpha's guarantee is all 8 and its 8-GPU job takes them in tier G; beta bids for 2
    at 10 credits, above the posted price, so no guarantee or price stands in its way: nothing is left."""
    w.nodes(w.h100, 1, size=8)
    for tenant in (w.alpha, w.beta):
        w.fund(tenant, 1000)
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    mine = make_job(w.alpha, w.amy, gpus=8, limits={w.h100: 3}, name="alpha-8", age_s=10)
    theirs = make_job(w.beta, w.bea, gpus=2, limits={w.h100: 10}, name="beta-2")
    done = rounds.round_tick()
    assert done is not None and done.winners == 1, done and done.error
    return mine, theirs, done


def test_a_bid_that_finds_every_gpu_in_use_is_busy_and_says_so_with_the_rounds_figures(world: World) -> None:
    w = world
    _, waiting, rnd = _busy_round(w)
    o = BidOutcome.objects.get(job=waiting, round=rnd)
    assert (o.won, o.reason, o.figure) == (False, BUSY, None)
    assert {k: rnd.counters[k] for k in rnd.counters if k.startswith("use_")} == {
        use_key("G", "H100"): 8,
        use_key("B", "H100"): 0,
        use_key("S", "H100"): 0,
        use_key("free", "H100"): 0,
    }
    [e] = explain_outcomes(waiting, BidOutcome.objects.filter(job=waiting), list(waiting.bids.all()))
    assert e.sentence == (
        f"Waiting for free H100 GPUs: in round {rnd.pk} none was left for spot bids: after it, 8 H100 GPUs were "
        "in use (8 guaranteed, 0 borrowed, 0 spot). No higher bid took its place, so a higher limit would not "
        "have helped; it stays queued and can win when running H100 jobs end and free 2 GPUs."
    )
    # The API's outcome carries the same sentence, and no price that "would have won".
    api = w.client(w.bea).get(f"/api/v1/tenants/beta/jobs/{waiting.pk}")
    assert api.status_code == 200
    [out] = api.json()["outcomes"]
    assert (out["reason"], out["figure"], out["would_have_won"], out["text"]) == (
        "busy",
        None,
        None,
        e.sentence,
    )
    # And the portal's job page.
    page = login(Client(), w.bea).get(f"/t/beta/jobs/{waiting.pk}/")
    assert page.status_code == 200 and "none was left for spot bids: after it, 8 H100 GPUs were in use" in (
        page.content.decode()
    )


def test_an_old_outbid_without_a_figure_reads_as_busy_not_as_a_price(world: World) -> None:
    """Rounds before the busy reason stored this case as outbid with no figure: the sentence is the same
    honest one (without the per-tier counts, which those rounds did not keep), never "a limit of ?"."""
    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 2.2})
    rnd = Round.objects.create(slot=timezone.now(), period_s=60)
    BidOutcome.objects.create(
        round=rnd, job=job, bid_version=1, gpu_type=world.h100, won=False, reason="outbid"
    )
    [e] = explain_outcomes(job, BidOutcome.objects.filter(job=job), list(job.bids.all()))
    assert e.sentence == (
        f"Waiting for free H100 GPUs: in round {rnd.pk} none was left for spot bids: guaranteed and borrowed "
        "jobs held or claimed every H100 GPU. No higher bid took its place, so a higher limit would not have "
        "helped; it stays queued and can win when running H100 jobs end and free 2 GPUs."
    )
