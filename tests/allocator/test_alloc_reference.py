"""Differential tests: the reference's vectorised forms of the sequential rules against the rules stated one gang
at a time (first-fit, water-filling, best fit). These are the only shortcuts in allocator/reference: each must
give exactly what the plain loop gives."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.book import Nodes
from allocator.reference.fill import fill_from, first_fit, water_fill
from allocator.reference.placement import Floor, best_fit

SIZES = st.lists(st.integers(1, 16), min_size=0, max_size=60)


def first_fit_loop(size: list[int], cap: list[int], seg: list[int]) -> list[bool]:
    """First-fit as the design states it: in order, a gang takes from its segment's cap if it still fits."""
    room, out = list(cap), []
    for k, m in zip(size, seg, strict=True):
        out.append(k <= room[m])
        if out[-1]:
            room[m] -= k
    return out


@settings(max_examples=400, deadline=None)
@given(SIZES, st.lists(st.integers(0, 40), min_size=1, max_size=6), st.randoms())
def test_first_fit_is_the_loop(size: list[int], cap: list[int], rnd: random.Random) -> None:
    seg = [rnd.randrange(len(cap)) for _ in size]
    got = first_fit(
        np.array(size, dtype=np.int64), np.array(cap, dtype=np.int64), np.array(seg, dtype=np.int64)
    )
    assert got.tolist() == first_fit_loop(size, cap, seg)
    one = first_fit(np.array(size, dtype=np.int64), np.array(cap[:1], dtype=np.int64))
    assert one.tolist() == first_fit_loop(size, cap[:1], [0] * len(size))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 8)), min_size=1, max_size=12),
    st.integers(0, 200),
)
def test_water_fill_levels_the_unsatisfied(rows: list[tuple[int, int]], supply: int) -> None:
    """e_t = min(want_t, w_t * level), sum e = min(supply, sum want): everyone below its want sits at one level."""
    want = np.array([r[0] for r in rows], dtype=np.float64)
    weight = np.array([r[1] for r in rows], dtype=np.float64)
    e = water_fill(want, weight, float(supply))
    assert (e <= want + 1e-9).all() and (e >= -1e-9).all()
    assert abs(e.sum() - min(supply, want.sum())) < 1e-6
    short = e < want - 1e-9
    if short.any():
        level = e[short] / weight[short]
        assert np.allclose(level, level[0]) and ((e / weight) <= level[0] + 1e-9).all()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=10),
    st.lists(st.integers(1, 8), min_size=1, max_size=10),
    st.integers(0, 100),
)
def test_fill_from_fills_the_furthest_below_first(
    rows: list[tuple[int, int]], weights: list[int], supply: int
) -> None:
    n = min(len(rows), len(weights))
    base = np.array([r[0] for r in rows[:n]], dtype=np.float64)
    cap = np.array([r[1] for r in rows[:n]], dtype=np.float64)
    w = np.array(weights[:n], dtype=np.float64)
    got = fill_from(base, cap, w, float(supply))
    assert (got >= -1e-9).all() and (got <= cap + 1e-9).all()
    assert got.sum() <= min(supply, cap.sum()) + 1e-6
    assert got.sum() >= min(supply, cap.sum()) - 1e-6 * n
    level = (base + got) / w
    gets = got > 1e-6
    unfilled = got < cap - 1e-6
    if gets.any() and unfilled.any():  # nobody who got GPUs ends above a tenant left short of its cap
        assert level[gets].max() <= level[unfilled].min() + 1e-6


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=12), st.integers(1, 8), st.integers(0, 30))
def test_best_fit_in_one_pass_is_one_search_per_gang(free: list[int], k: int, gangs: int) -> None:
    """A size class placed in one pass equals placing its gangs one by one on the open node with the fewest
    free GPUs that holds the gang, ties by node index."""
    n = len(free)
    slots = np.arange(8)[None, :] < np.array(free)[:, None]
    nodes = Nodes(
        tuple(f"n{i}" for i in range(n)),
        np.zeros(n, dtype=np.int32),
        np.zeros(n, dtype=np.int32),
        np.full(n, 8, dtype=np.int32),
        slots,
    )
    floor = Floor.of(nodes, 1)
    placed = best_fit(floor, 0, k, np.arange(gangs, dtype=np.int64), 0)
    left, want = list(free), []
    for _ in range(gangs):
        fits = [(f, i) for i, f in enumerate(left) if f >= k]
        if not fits:
            break
        _, i = min(fits)
        left[i] -= k
        want.append(i)
    assert int(placed.sum()) == len(want)
    got = np.concatenate([b.node for b in floor.batches]).tolist() if floor.batches else []
    assert got == want and floor.free.tolist() == left  # the same node for every gang, in order
