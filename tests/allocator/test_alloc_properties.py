"""Property tests: every invariant of ARCHITECTURE.md §Clearing over random books, plus determinism.

The invariants themselves live in allocator/invariants.py (shared with `python -m allocator check`).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from alloc_books import Shape, make_book, shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import Book, clear, clearing
from allocator.invariants import CHECKS, check
from allocator.result_json import result_from_json

FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(shapes())
def test_every_invariant_holds(shape: Shape) -> None:
    book = make_book(shape)
    assert check(book, clear(book)) == []


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


def Bids_with(book: Book, limit: np.ndarray) -> object:
    b = book.bids
    return type(b)(b.job, b.tenant, b.gpus, limit, b.max_s, b.submit, b.waited)


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


def cleared(book: Book, *, slate_from: int, depth: float = 1.25, slack: int = 4096) -> str:
    """The digest of ``clear(book)`` with the slate shortcut taken from ``slate_from`` bids per type on."""
    saved = (clearing.PRUNE_MIN, clearing.PRUNE_DEPTH, clearing.PRUNE_SLACK)
    clearing.PRUNE_MIN, clearing.PRUNE_DEPTH, clearing.PRUNE_SLACK = slate_from, depth, slack
    try:
        result = clear(book)
    finally:
        clearing.PRUNE_MIN, clearing.PRUNE_DEPTH, clearing.PRUNE_SLACK = saved
    assert check(book, result) == []
    return result.digest


@settings(max_examples=300, deadline=None)
@given(shapes(), st.sampled_from([0.25, 0.5, 1.0, 2.0]), st.sampled_from([0, 3]))
def test_the_slate_shortcut_changes_nothing(shape: Shape, depth: float, slack: int) -> None:
    """Clearing on a slate (bids at or above θ, allocator/clearing.py) gives the same bytes as clearing every
    bid, whatever θ: shallow slates force the fallbacks (tier G below θ, spot or the final fill reaching below
    θ, a second clearing of the type)."""
    book = make_book(shape)
    assert cleared(book, slate_from=0, depth=depth, slack=slack) == cleared(book, slate_from=1 << 40)


def cleared_without(book: Book, shortcut: str) -> str:
    """The digest of ``clear(book)`` with the shortcut switched by ``clearing.<shortcut>`` off: ``SOLD_OUT``
    (every bid of a later pass cleared even in a sold-out type), ``SETTLE`` (each type rule by rule, never in
    one compiled call)."""
    setattr(clearing, shortcut, False)
    try:
        result = clear(book)
    finally:
        setattr(clearing, shortcut, True)
    assert check(book, result) == []
    return result.digest


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_the_sold_out_shortcut_changes_nothing(shape: Shape) -> None:
    """A later pass in a type with no GPU free on its open nodes keeps only the bids that could still win
    (``clearing.sold_out``) and placement walks no group there: the same bytes as clearing every bid."""
    book = make_book(shape)
    assert clear(book).digest == cleared_without(book, "SOLD_OUT")


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_one_compiled_call_per_type_changes_nothing(shape: Shape) -> None:
    """``settle.settle_type`` runs the tiers, starving gangs, placement, reclaim and outcomes of a type in one
    call: the same bytes as the step-by-step path (which it leaves gangs larger than a node to)."""
    book = make_book(shape)
    assert clear(book).digest == cleared_without(book, "SETTLE")


@pytest.mark.parametrize("seed", range(6))
def test_the_slate_shortcut_changes_nothing_on_larger_books(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = Shape(
        int(rng.integers(1, 4)),
        int(rng.integers(5, 200)),
        int(rng.integers(20, 120)),
        3000,
        seed,
        seed % 2 == 0,
    )
    book = make_book(shape)
    whole = cleared(book, slate_from=1 << 40)
    for depth in (0.5, 1.0, 1.25, 3.0):
        assert cleared(book, slate_from=0, depth=depth, slack=0) == whole


@pytest.mark.parametrize("span", [1, 10**6, 2**40, 2**61])
@pytest.mark.parametrize("in_order", [True, False])
def test_market_order_packed_keys_match_lexsort(span: int, in_order: bool) -> None:
    """Market order (price desc, submit, job) from packed integer keys, with or without carried columns, equals
    the plain lexsort whether the keys fit in 63 bits or not (then it falls back)."""
    from allocator.tiers import Ranks, market_columns, market_order

    rng = np.random.default_rng(span % 1000 + in_order)
    n = 4000
    price = rng.integers(0, span, n, endpoint=True).astype(np.int64)
    price[::5] = price[3]  # ties
    submit = np.arange(n) if in_order else rng.integers(0, 40, n)
    job = np.arange(n) if in_order else rng.permutation(n)
    by_rank = np.lexsort((job, submit)).astype(np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[by_rank] = np.arange(n)
    ranks = Ranks(None, None, n) if in_order else Ranks(rank, by_rank, n)
    tenant = rng.integers(0, 300, n).astype(np.int32)
    gpus = rng.integers(1, 17, n).astype(np.int32)
    rows = np.sort(rng.choice(n, 3000, replace=False))
    want = rows[np.lexsort((rank[rows], -price[rows]))]
    got, p = market_order(rows, price, ranks)
    assert (got == want).all() and (p == price[want]).all()
    got, p, g, m = market_columns(rows, price, ranks, gpus, tenant)
    assert (got == want).all() and (p == price[want]).all()
    assert (g == gpus[want]).all() and (m == tenant[want]).all()


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


def test_either_sort_gives_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Market order sorts with numpy or the radix sort, whichever is faster on the machine (timed once,
    ``tiers.numpy_sorts_faster``); both give the same bytes."""
    from allocator import tiers

    book = make_book(Shape(1, 40, 60, 5000, 11, True))  # sorts of over 2,048 keys
    digests = set()
    for numpy_faster in (True, False):
        monkeypatch.setattr(tiers, "_SORTER", [numpy_faster])
        digests.add(clear(book).digest)
    assert len(digests) == 1
