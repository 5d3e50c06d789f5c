"""The fair-share definition (allocator/fairshare.py), by hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from allocator import fairshare
from allocator.book import MICRO, Bids, Book, GpuTypes, Nodes, Policy, Tenants


def _targets(
    held: list[list[int]], waiting: list[list[int]], q: list[list[int]], w: list[float], cap: list[int]
):
    return fairshare.targets(held, waiting, q, w, cap)


@pytest.mark.parametrize(
    ("case", "held", "waiting", "q", "w", "cap", "want"),
    [
        # A's demand (2 held + 1 waiting) is below its guarantee of 6: its target is its demand; the 3 GPUs
        # nobody's guarantee part takes go to B, the only tenant with demand left.
        ("demand below guarantee", [[2], [4]], [[1], [6]], [[6], [4]], [1, 1], [10], [[3], [7]]),
        # no guarantees: 12 GPUs by weight 1:2, each capped at its demand
        ("by weight", [[0], [0]], [[10], [10]], [[0], [0]], [1, 2], [12], [[4], [8]]),
        ("capped at demand", [[0], [0]], [[2], [10]], [[0], [0]], [1, 2], [12], [[2], [10]]),
        # A holds 8 beyond its guarantee of 4 while B waits for 4: both are owed their guarantee
        ("over target while another is under", [[8], [0]], [[0], [4]], [[4], [4]], [1, 1], [8], [[4], [4]]),
        # two types are filled apart: type 0 by weight, type 1 all to B (A has no demand there)
        ("two types", [[0, 0], [0, 2]], [[6, 0], [6, 6]], [[0, 0], [0, 0]], [1, 1], [6, 4], [[3, 0], [3, 4]]),
        # nothing waits: the target is what each holds
        ("uncontended", [[3], [5]], [[0], [0]], [[4], [4]], [1, 3], [10], [[3], [5]]),
    ],
)
def test_targets(case, held, waiting, q, w, cap, want) -> None:
    assert np.allclose(_targets(held, waiting, q, w, cap), want), case


def test_targets_over_ticks_match_one_tick_at_a_time() -> None:
    rng = np.random.default_rng(3)
    held = rng.integers(0, 6, size=(50, 4, 2))
    waiting = rng.integers(0, 6, size=(50, 4, 2))
    q, w, cap = rng.integers(0, 4, size=(4, 2)), rng.uniform(0.5, 3, 4), np.array([16, 12])
    held = np.minimum(held, 3)  # within the types' sizes
    many = fairshare.targets(held, waiting, q, w, cap)
    for k in range(50):
        assert np.allclose(many[k], fairshare.targets(held[k], waiting[k], q, w, cap))
    assert (many.sum(axis=1) <= cap[None, :] + 1e-9).all()
    assert (many <= held + waiting + 1e-9).all()


def _series(held, waiting, smallest, q, w, cap, ticks=None):
    held = np.asarray(held, dtype=float)
    ticks = np.arange(held.shape[0]) * 300 if ticks is None else ticks
    return fairshare.Series.of(ticks, held, waiting, smallest, q, w, cap)


def test_gang_larger_than_its_target_complies_per_round_but_not_over_the_window() -> None:
    # 8 GPUs, weights 1:1 and no guarantees; A runs 8 and waits for 4 more, B waits with one gang of 8: B's
    # target is 4, its shortfall (4) is smaller than its smallest gang (8), so per round it complies (no gang of
    # its could have used what it was short of); over the window it held nothing of its 4 and does not.
    s = _series([[[8], [0]]] * 3, [[[4], [8]]] * 3, [[[4], [8]]] * 3, [[0], [0]], [1, 1], [8])
    assert np.allclose(s.target[0], [[4], [4]])
    counted, complied = fairshare.round_pairs(s)
    assert counted[:, 1, 0].all() and complied[:, 1, 0].all()
    assert fairshare.window_compliance_by_tenant(s, 86400) == [1.0, 0.0]
    assert fairshare.window_compliance(s, 86400) == 0.5


def test_window_counts_only_contended_ticks_and_tenants_that_waited() -> None:
    # tick 0: nobody waits (not contended); ticks 1-2: B waits. A never waits: no (A, window) pair.
    held = [[[6], [2]], [[6], [2]], [[4], [4]]]
    waiting = [[[0], [0]], [[0], [2]], [[0], [2]]]
    s = _series(held, waiting, np.where(np.asarray(waiting) > 0, 2.0, np.inf), [[4], [4]], [1, 1], [8])
    # targets on contended ticks: B 4 (its demand is 4), held 2 then 4: 6 of 8 = 0.75 < 0.95
    assert fairshare.window_compliance_by_tenant(s, 86400) == [None, 0.0]
    # per round: tick 1 short by 2, smallest gang 2: not compliant; tick 2 holds its target
    assert fairshare.round_compliance(s) == 0.5
    # shortfall: tick 1 (4 - 2) / 8, tick 2 0: averaged over the 2 contended ticks
    assert fairshare.shortfall(s) == 0.125
    assert fairshare.shortfall_by_tenant(s) == [0.0, 0.125]


def test_windows_are_separate() -> None:
    # one hour windows over 24 ticks of 300 s: B is short in the first hour only
    held = [[[0]]] * 12 + [[[4]]] * 12
    waiting = [[[4]]] * 24
    s = _series(held, waiting, [[[4]]] * 24, [[0]], [1], [4])
    assert fairshare.window_compliance(s, 3600) == 0.5
    assert fairshare.window_compliance(s, 86400) == 0.0  # 48 of 96 GPU-ticks


def _book(balance_b: int, owed=None, half_life: int = 86400) -> Book:
    types = GpuTypes(("h100",), np.array([MICRO]), np.array([MICRO]), np.array([10 * MICRO]))
    i32 = np.int32
    nodes = Nodes(
        ("n0",), np.array([0], i32), np.array([0], i32), np.array([8], i32), np.ones((1, 8), dtype=bool)
    )
    held = np.zeros((2, 3, 1), dtype=np.int32)
    owed = np.zeros((2, 1)) if owed is None else owed
    tenants = Tenants(
        ("a", "b"),
        np.array([1.0, 1.0]),
        np.array([[0], [0]], i32),
        held,
        np.array([100 * MICRO, balance_b]),
        np.array([-1, -1]),
        owed,
    )
    bids = Bids.from_rows(
        [
            {"job": 1, "tenant": "a", "gpus": 2, "limits": {"h100": MICRO}, "max_s": 3600},
            {"job": 2, "tenant": "b", "gpus": 4, "limits": {"h100": MICRO}, "max_s": 3600},
        ],
        types.names,
        ("a", "b"),
    )
    return Book(0, 1, types, nodes, tenants, bids, policy=Policy(fair_share_half_life_s=half_life))


def test_an_unaffordable_job_is_not_demand() -> None:
    # b's hold is 4 GPUs x 1 credit x 1 h = 4 credits; with 3 it cannot afford it, with 4 it can
    poor = fairshare.book_demand(_book(3 * MICRO))
    assert poor.waiting.tolist() == [[2.0], [0.0]]
    assert fairshare.book_demand(_book(4 * MICRO)).waiting.tolist() == [[2.0], [4.0]]
    assert fairshare.book_targets(_book(4 * MICRO)).tolist() == [[2.0], [4.0]]


def test_history_decays_and_accrues_from_the_state_the_round_leaves() -> None:
    import allocator

    book = _book(4 * MICRO, owed=[[2.0], [-1.0]])
    result = allocator.clear(book)
    assert len(result.winners) == 2  # both fit the free node: nobody is short afterwards
    after = fairshare.owed_after(book, result, dt_s=86400, interval_s=300)
    assert np.allclose(after, [[1.0], [-0.5]])  # halved over one half-life, nothing added
    assert np.allclose(
        fairshare.owed_after(_book(4 * MICRO, [[2.0], [0.0]], half_life=0), result, 60, 300), 0
    )
    # accrual: 4 GPUs short for half an hour is 2 GPU-hours owed
    assert np.allclose(fairshare.accrue([[0.0]], [[4.0]], [[0.0]], 1800), [[2.0]])


def test_credit_is_owed_over_payback_and_at_most_one_node() -> None:
    book = _book(4 * MICRO, owed=[[2.0], [-100.0]])
    assert np.allclose(fairshare.credit(book, 0), [2.0, -8.0])  # payback 1 h; one node is 8 GPUs
    assert np.allclose(fairshare.credit(_book(4 * MICRO, [[2.0], [1.0]], half_life=0), 0), 0)


def test_history_is_part_of_the_frozen_book_and_the_round_re_clears_to_the_same_digest() -> None:
    import allocator

    book = _book(4 * MICRO, owed=[[3.5], [-1.25]])
    doc = book.to_json()
    assert doc["tenants"][0]["owed"] == {"h100": 3.5}
    assert doc["policy"]["fair_share_half_life_s"] == 86400
    again = Book.from_json(doc)
    assert np.array_equal(again.tenants.owed, book.tenants.owed)
    assert allocator.clear(again).digest == allocator.clear(book).digest


def test_owed_in_the_book_json_names_the_field_when_bad() -> None:
    from allocator.errors import BookError

    doc = _book(4 * MICRO).to_json()
    doc["tenants"][1]["owed"] = {"h100": "lots"}
    with pytest.raises(BookError, match=r"tenants\[1\]\.owed\.h100"):
        Book.from_json(doc)


def test_reclaim_prefers_the_victim_that_loses_the_least_work() -> None:
    import allocator

    # b's guarantee of 4 is lent out as two spot leases of a on one node, both past the minimum runtime; the
    # older one checkpointed a minute ago, the younger never: preempting the older loses 4 GPU-minutes, the
    # younger 4 GPUs x 50 min. Reclaim takes the older (before, youngest first took the younger).
    now = 100_000
    doc = {
        "now": now,
        "round": 1,
        "gpu_types": [{"name": "h100", "reserve": MICRO}],
        "nodes": [{"name": "n0", "gpu_type": "h100", "capacity": 8}],
        "tenants": [
            {"name": "a", "balance": 100 * MICRO},
            {"name": "b", "balance": 100 * MICRO, "guarantee": {"h100": 4}},
        ],
        "leases": [
            {"lease": 1, "tenant": "a", "gpu_type": "h100", "tier": "S", "start": now - 7200,
             "checkpoint": now - 60, "gpus": [["n0", 0], ["n0", 1], ["n0", 2], ["n0", 3]]},
            {"lease": 2, "tenant": "a", "gpu_type": "h100", "tier": "S", "start": now - 3000,
             "gpus": [["n0", 4], ["n0", 5], ["n0", 6], ["n0", 7]]},
        ],
        "bids": [{"job": 9, "tenant": "b", "gpus": 4, "limits": {"h100": MICRO}, "max_s": 3600}],
    }  # fmt: skip
    book = Book.from_json(doc)
    assert book.leases.lost_gpu_s(now).tolist() == [240, 12000]
    result = allocator.clear(book)
    assert result.preemptions.lease.tolist() == [1]
