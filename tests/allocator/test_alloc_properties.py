"""Property tests: every invariant of ARCHITECTURE.md §Clearing over random books, plus determinism.

The invariants themselves live in allocator/invariants.py (shared with `python -m allocator check`).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings

from allocator import FAIR_SHARE, Bids, Book, clear
from allocator.invariants import CHECKS, check
from allocator.result_json import result_from_json
from tests.allocator.alloc_books import Shape, make_book, make_hoarded_book, shapes

FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(shapes())
# Found by this test: fair reclaim takes a tenant's only running lease (4 GPUs, guarantee 3) in the pass where
# the same tenant wins 20 GPUs; it ends the round far above its guarantee, which is what the rule asks.
@example(Shape(n_types=1, n_tenants=10, n_nodes=10, n_bids=44, seed=44, rich=True))
def test_every_invariant_holds(shape: Shape) -> None:
    book = make_book(shape)
    assert check(book, clear(book)) == []


@FAST
@given(shapes())
def test_every_invariant_holds_under_fair_reclaim(shape: Shape) -> None:
    """Books where one tenant of weight 1 holds every lease in tier B past the minimum runtime and prices sit
    at the reserve, so fair reclaim preempts in about one in nine of them: every invariant still holds (the
    preemption rules among them), and fair reclaim takes only from the one tenant above its entitlement."""
    book = make_hoarded_book(shape)
    result = clear(book)
    assert check(book, result) == []
    fair = result.preemptions.reason == FAIR_SHARE
    assert (book.leases.tenant[result.preemptions.row[fair]] == 0).all()


@FAST
@given(shapes())
def test_every_invariant_holds_under_fair_reclaim_of_leases_over_nodes(shape: Shape) -> None:
    """As above with every GPU held by two hoarders, half of it in leases on two nodes, so a gang larger than a
    node lands only by reclaim, which must count a lease once over the nodes it frees and a tenant's loss over
    all of them: every invariant holds, and fair reclaim takes only from the hoarders."""
    book = make_hoarded_book(shape, hoarders=2, full=True)
    result = clear(book)
    assert check(book, result) == []
    fair = result.preemptions.reason == FAIR_SHARE
    assert (book.leases.tenant[result.preemptions.row[fair]] <= 1).all()


@settings(max_examples=60, deadline=None)
@given(shapes())
def test_same_book_same_bytes(shape: Shape) -> None:
    first, second = clear(make_book(shape)), clear(make_book(shape))
    assert first.digest == second.digest
    assert json.dumps(first.to_json()) == json.dumps(second.to_json())


@settings(max_examples=40, deadline=None)
@given(shapes())
def test_json_round_trips_keep_the_result(shape: Shape) -> None:
    book = make_book(shape)
    result = clear(book)
    again = Book.from_json(json.loads(json.dumps(book.to_json())))
    assert clear(again).digest == result.digest
    read = result_from_json(json.loads(json.dumps(result.to_json())), book)
    assert read.digest == result.digest
    assert check(book, read) == []


@settings(max_examples=200, deadline=None)
@given(shapes(max_types=1, rich=True))
def test_raising_a_winning_bid_never_makes_it_lose(shape: Shape) -> None:
    """Within a pool (one GPU type, budgets that do not bind), a winner that bids more still wins."""
    book = make_book(shape)
    result = clear(book)
    for row in result.winners.bid[:5].tolist():
        limit = book.bids.limit.copy()
        limit[row, 0] += 3_000_000
        raised = Book(
            book.now,
            book.round,
            book.types,
            book.nodes,
            book.tenants,
            Bids_with(book, limit),
            book.leases,
            book.policy,
        )
        assert row in clear(raised).winners.bid.tolist(), (
            f"job {book.bids.job[row]} lost after raising its bid"
        )


def Bids_with(book: Book, limit: np.ndarray) -> Bids:
    return replace(book.bids, limit=limit)


def test_checks_catch_a_broken_result() -> None:
    """The checker is not vacuous: a result with a GPU bound twice and a price above the bid is rejected."""
    book = make_book(Shape(1, 3, 2, 30, 7, True))
    result = clear(book)
    w = result.winners
    assert len(w) >= 2
    dup = replace(
        w,
        slot_node=np.full_like(w.slot_node, w.slot_node[0]),
        slot_idx=np.full_like(w.slot_idx, w.slot_idx[0]),
    )
    pricey = replace(w, price=w.price + 10**12)
    assert any("bound twice" in v for v in check(book, replace(result, winners=dup)))
    assert any("more than its bid" in v for v in check(book, replace(result, winners=pricey)))
    assert len(CHECKS) >= 10


@pytest.mark.parametrize("span", [1, 10**6, 2**40, 2**61])
@pytest.mark.parametrize("in_order", [True, False])
def test_market_order_packed_keys_match_lexsort(span: int, in_order: bool) -> None:
    """Market order (price desc, submit, job) from packed integer keys equals the plain lexsort whether the keys
    fit in 63 bits or not (then it falls back), with bids in tie order or not."""
    from allocator.reference.order import TieRank, market_order

    rng = np.random.default_rng(span % 1000 + in_order)
    n = 4000
    price = rng.integers(0, span, n, endpoint=True).astype(np.int64)
    price[::5] = price[3]  # ties
    submit = np.arange(n) if in_order else rng.integers(0, 40, n)
    job = np.arange(n) + 1 if in_order else rng.permutation(n) + 1
    bids = Bids(
        job,
        np.zeros(n, dtype=np.int32),
        np.ones(n, dtype=np.int32),
        price[:, None],
        np.full(n, 3600),
        submit,
        np.zeros(n, dtype=np.int32),
    )
    ranks = TieRank(bids)
    assert ranks.identity == in_order
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((job, submit))] = np.arange(n)
    rows = np.sort(rng.choice(n, 3000, replace=False))
    want = rows[np.lexsort((rank[rows], -price[rows]))]
    got, p = market_order(rows, price, ranks)
    assert (got == want).all() and (p == price[want]).all()


def test_the_digest_depends_on_the_values_not_the_dtypes() -> None:
    """The same values in wider or narrower integer columns hash alike (a result read back from JSON); one value
    changed, or a row moved, changes the digest."""
    from allocator.digest import compute_digest

    result = clear(make_book(Shape(2, 6, 8, 60, 7, True)))
    w = result.winners
    assert len(w) > 2
    wide = replace(w, tier=w.tier.astype(np.int64), gpu_type=w.gpu_type.astype(np.int16))
    assert compute_digest(replace(result, winners=wide, digest="x")) == result.digest
    price = w.price.copy()
    price[1] += 1
    assert compute_digest(replace(result, winners=replace(w, price=price), digest="x")) != result.digest
    swapped = replace(w, job=w.job[[1, 0, *range(2, len(w))]])
    assert compute_digest(replace(result, winners=swapped, digest="x")) != result.digest
