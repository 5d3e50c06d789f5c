"""Shadow rounds, the pure half (market.selectors.shadow_book, market.selectors.shadow_diff): the book as a
proposal would have frozen it, and what clearing it changes against the live result."""

from __future__ import annotations

import copy

import numpy as np

from allocator import MICRO, NO_PRICE, Book, clear
from market.selectors.policy_snapshot import PolicySnapshot, TenantPolicy
from market.selectors.shadow_book import book_under
from market.selectors.shadow_diff import SUMMARY_KEYS, shadow_round
from tests.allocator.test_alloc_tables import TWO_NODES, bids, book, tenant

BOOK = book(
    [TWO_NODES[0]],  # one node of 8 GPUs
    [tenant("a", guarantee=2), tenant("b", weight=1), tenant("c", guardrail=5 * MICRO)],
    bids("a", 8, first_job=100) + bids("b", 8, first_job=200),
)


def live_book() -> Book:
    return Book.from_json(copy.deepcopy(BOOK))


def proposal(**tenants: TenantPolicy) -> PolicySnapshot:
    """The book's own policy as a snapshot, with the tenants' entries given here."""
    return PolicySnapshot(market={}, gpu_types={}, tenants=tenants)


def entry(weight: int = 1, guardrail: int | None = None, **guarantees: int) -> TenantPolicy:
    return TenantPolicy(weight=weight, guardrail=guardrail, guarantees=guarantees, allowance=None)


def test_a_knob_a_weight_a_guarantee_and_prices_reach_the_book():
    live = live_book()
    shadow = book_under(
        live,
        PolicySnapshot(
            market={"min_runtime_s": 60, "fair_reclaim": 0, "round_seconds": 30, "retention_days": 3},
            gpu_types={"h100": {"reserve_price": 3 * MICRO, "max_price": 4 * MICRO}},
            tenants={"a": entry(weight=5), "b": entry(weight=2, guardrail=7, h100=3)},
        ),
    )
    assert shadow.policy.min_runtime_s == 60 and shadow.policy.fair_reclaim is False
    assert shadow.policy.price_step_bp == live.policy.price_step_bp  # not named: today's
    assert shadow.tenants.weight.tolist() == [5.0, 2.0, 1.0]
    # a's entry names no guarantee: it has none under the proposal; b's names one.
    assert shadow.tenants.guarantee[:, 0].tolist() == [0, 3, 0]
    assert shadow.tenants.guardrail.tolist() == [NO_PRICE, 7, 5 * MICRO]
    # The posted price is kept within the new bounds (it was 2, below the new reserve of 3).
    h100 = shadow.types.names.index("h100")
    assert shadow.types.reserve[h100] == 3 * MICRO and shadow.types.posted[h100] == 3 * MICRO
    assert shadow.types.max_price[h100] == 4 * MICRO
    # A type the proposal does not name keeps today's bounds; the world (bids, nodes, leases) is unchanged.
    a100 = shadow.types.names.index("a100")
    assert shadow.types.reserve[a100] == live.types.reserve[a100]
    assert shadow.bids is live.bids and shadow.nodes is live.nodes and shadow.leases is live.leases


def test_a_tenant_or_type_absent_from_the_proposal_keeps_todays_values():
    live = live_book()
    shadow = book_under(live, proposal(b=entry(weight=4), gone=entry(weight=9)))
    assert shadow.tenants.weight.tolist() == [1.0, 4.0, 1.0]  # a and c: today's; "gone" is not in the book
    assert np.array_equal(shadow.tenants.guarantee[0], live.tenants.guarantee[0])
    assert shadow.tenants.guardrail[2] == live.tenants.guardrail[2]
    assert shadow.policy == live.policy
    assert np.array_equal(shadow.types.reserve, live.types.reserve)
    assert np.array_equal(shadow.types.posted, live.types.posted)


def test_the_same_policy_differs_in_nothing():
    live = live_book()
    diff = shadow_round(live, clear(live), proposal())
    assert set(diff.summary) == set(SUMMARY_KEYS)
    assert diff.summary["gained"] == diff.summary["lost"] == diff.summary["repriced"] == 0
    assert diff.summary["winners_live"] == diff.summary["winners_proposed"] > 0
    assert diff.tenants == {}
    assert all(p["posted_live"] == p["posted_proposed"] for p in diff.prices.values())


def test_raising_a_weight_wins_bids_the_tenant_lost_live():
    live = live_book()
    result = clear(live)
    won_live = {w.tenant: 0 for w in result.winner_records()}
    for w in result.winner_records():
        won_live[w.tenant] += 1
    diff = shadow_round(live, result, proposal(b=entry(weight=3)))
    b = diff.tenants["b"]
    assert b["won_live"] == won_live["b"]
    assert b["gained"] > 0 and b["lost"] == 0 and b["won_proposed"] == b["won_live"] + b["gained"]
    assert b["gpus_proposed"] > b["gpus_live"] and b["gpu_hours_proposed"] > b["gpu_hours_live"]
    a = diff.tenants["a"]
    assert a["lost"] == b["gained"] and a["gained"] == 0
    assert diff.summary["gained"] == b["gained"] and diff.summary["lost"] == a["lost"]
    assert b["target_proposed"] > b["target_live"]
    assert "c" not in diff.tenants  # nothing differs for c


def test_accumulated_fair_share_counts_only_rounds_where_the_tenant_waited_on_both_sides():
    from market.selectors.shadow import accumulate

    def tenant(live: bool | None, proposed: bool | None) -> dict[str, object]:
        return {"gained": 1, "lost": 0, "complied_live": live, "complied_proposed": proposed}

    prices = {"h100": {"posted_live": 100, "posted_proposed": 130}}
    rounds = [
        ({"gained": 1}, {"a": tenant(False, True)}, prices),  # better under the proposal
        ({"gained": 1}, {"a": tenant(True, False)}, prices),  # worse
        ({"gained": 1}, {"a": tenant(True, None)}, {"h100": {"posted_live": 100, "posted_proposed": 100}}),
    ]
    totals = accumulate(iter(rounds))
    assert totals.summary["rounds"] == 3 and totals.summary["gained"] == 3
    assert totals.tenants["a"]["fair_better"] == 1 and totals.tenants["a"]["fair_worse"] == 1
    assert totals.tenants["a"]["gained"] == 3
    assert totals.prices["h100"] == {"rounds": 3, "differ": 2, "mean_diff": 20}


def test_a_guarantee_the_proposal_grants_shows_as_preemptions_only_it_makes():
    from tests.allocator.test_alloc_tables import A_HOLDS_ALL, FULL

    live = Book.from_json(
        book(FULL, [tenant("a"), tenant("b")], bids("b", 2, first_job=300), A_HOLDS_ALL, fair_reclaim=False)
    )
    result = clear(live)
    assert len(result.preemptions) == 0  # b has no guarantee: the full cluster stays a's
    diff = shadow_round(live, result, proposal(b=entry(h100=2)))
    assert diff.summary["preemptions_live"] == 0 and diff.summary["preemptions_proposed"] == 2
    assert diff.tenants["a"]["preempted_proposed"] == 2 and diff.tenants["a"]["preempted_live"] == 0
    assert diff.tenants["b"]["gained"] == 2 and diff.tenants["b"]["held_proposed"] == 2
