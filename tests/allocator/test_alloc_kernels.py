"""The compiled loops of allocator/kernels.py against plain Python statements of the same rules.

The whole-round tests (tables, invariants, the slate) already run every kernel; these pin each rule on its own,
over random inputs, so that a kernel that drifts is named directly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import kernels as k
from allocator.tiers import Ranks, market_positions

SEEDS = st.integers(0, 2**32 - 1)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@settings(max_examples=200, deadline=None)
@given(SEEDS, st.integers(0, 60), st.integers(1, 6))
def test_first_fit_is_sequential_first_fit(seed: int, n: int, n_seg: int) -> None:
    rng = _rng(seed)
    seg = rng.integers(0, n_seg, n).astype(np.int32)
    size = rng.integers(1, 9, n).astype(np.int32)
    cap = rng.integers(0, 20, n_seg).astype(np.int64)
    tier = np.where(rng.random(n) < 0.2, 0, -1).astype(np.int8)  # some positions already taken
    hi = int(rng.integers(0, n + 1))
    want_tier, want_cap, taken = tier.copy(), cap.copy(), 0
    for i in range(hi):
        if want_tier[i] == -1 and size[i] <= want_cap[seg[i]]:
            want_tier[i], taken = 7, taken + int(size[i])
            want_cap[seg[i]] -= size[i]
    got = k.first_fit(tier, 7, hi, seg, size, cap)
    assert got == taken and (tier == want_tier).all() and (cap == want_cap).all()


@settings(max_examples=200, deadline=None)
@given(SEEDS, st.integers(0, 40))
def test_budget_prefix_stops_each_tenant_at_its_first_miss(seed: int, n: int) -> None:
    rng = _rng(seed)
    tenant = rng.integers(0, 4, n).astype(np.int32)
    need = rng.integers(0, 50, n).astype(np.int64)
    budget = rng.integers(-5, 150, 4).astype(np.int64)
    rows = np.sort(rng.choice(1000, n, replace=False)).astype(np.int64)
    order = rng.permutation(n).astype(np.int64)
    over = np.zeros(1000, dtype=np.bool_)
    over[rows[: n // 3]] = True  # refused in an earlier pass: its first figure stands
    choice = np.full(1000, 2, dtype=np.int32)
    kind, figure = np.full(1000, -1, dtype=np.int32), np.zeros(1000, dtype=np.int64)
    refused = np.empty(n, dtype=np.int64)
    got = refused[
        : k.budget_prefix(order, rows, tenant, need, budget, choice, over.copy(), kind, figure, refused)
    ]
    spent, blocked, want = [0] * 4, [False] * 4, []
    for i in order.tolist():
        t = int(tenant[i])
        if not blocked[t] and spent[t] + int(need[i]) <= budget[t]:
            spent[t] += int(need[i])
        else:
            blocked[t] = True
            want.append(int(rows[i]))
    assert got.tolist() == want
    fresh = [r for r in want if not over[r]]
    assert (kind[fresh] == 2).all() and (figure[over] == 0).all()


@settings(max_examples=200, deadline=None)
@given(SEEDS, st.integers(1, 70), st.lists(st.integers(1, 8), min_size=1, max_size=4))
def test_best_fit_run_places_each_gang_on_the_tightest_node(
    seed: int, n_nodes: int, sizes: list[int]
) -> None:
    """Runs of same-size gangs, largest first as placement gives them, each gang on the node with the fewest
    free GPUs that still holds it (ties: lowest index), matching a gang-by-gang search."""
    rng = _rng(seed)
    f = rng.integers(0, 9, n_nodes).astype(np.int64)
    used = rng.integers(0, 3, n_nodes).astype(np.int64)
    want_f, want_used = f.copy(), used.copy()
    bits, cursor = k.free_bitmaps(f)
    for size in sorted(sizes, reverse=True):
        m = int(rng.integers(0, 40))
        node, offset = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
        n = k.best_fit_run(bits, cursor, f, used, size, node, offset)
        want = []
        for _ in range(m):
            fits = [j for j in range(n_nodes) if want_f[j] >= size]
            if not fits:
                break
            j = min(fits, key=lambda j: (want_f[j], j))
            want.append((j, int(want_used[j])))
            want_f[j] -= size
            want_used[j] += size
        assert list(zip(node[:n].tolist(), offset[:n].tolist(), strict=True)) == want
        assert (f == want_f).all() and (used == want_used).all()
        assert (k.fewest_free(bits, cursor, size) >= 0) == bool((want_f >= size).any())


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 300), st.integers(1, 20))
def test_counting_order_is_a_stable_sort(seed: int, n: int, n_keys: int) -> None:
    key = _rng(seed).integers(0, n_keys, n).astype(np.int64)
    order = np.empty(n, dtype=np.int64)
    start = k.counting_order(key, n_keys, order)
    assert (order == np.argsort(key, kind="stable")).all()
    assert (start == np.searchsorted(np.sort(key), np.arange(n_keys + 1))).all()


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 200), st.booleans())
def test_split_rows_and_market_positions(seed: int, n: int, in_order: bool) -> None:
    rng = _rng(seed)
    total = max(n, 1) * 2
    rows = np.sort(rng.choice(total, n, replace=False)).astype(np.int64)
    price = rng.integers(0, 10, total).astype(np.int64)
    theta = int(rng.integers(0, 11))
    high = np.empty(k.count_at_least(rows, price, theta), dtype=np.int64)
    low = np.empty(n - high.size, dtype=np.int64)
    k.split_rows(rows, price, theta, high, low)
    assert high.tolist() == [r for r in rows.tolist() if price[r] >= theta]
    assert low.tolist() == [r for r in rows.tolist() if price[r] < theta]
    if in_order:
        ranks = Ranks(None, None, total)
        rank = np.arange(total)
    else:
        rank = rng.permutation(total).astype(np.int64)
        by_rank = np.argsort(rank).astype(np.int64)
        ranks = Ranks(rank, by_rank, total)
    pos = market_positions(rows, price[rows], ranks)
    assert pos.tolist() == np.lexsort((rank[rows], -price[rows])).tolist()


def test_warm_up_reaches_every_kernel() -> None:
    """A Celery worker calls ``warm_up`` when it starts so that no round compiles a kernel; it must call each."""
    import numba

    from allocator import warm_up

    result = warm_up()
    assert len(result.winners) and len(result.losers) and result.counters["starving_placed"]
    kernels = {
        n: getattr(k, n) for n in dir(k) if isinstance(getattr(k, n), numba.core.registry.CPUDispatcher)
    }
    inlined = {"_loss"}  # only ever called from another kernel
    assert [n for n, f in kernels.items() if not f.signatures and n not in inlined] == []


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 40), st.integers(1, 3))
def test_result_columns_match_their_plain_statements(seed: int, n: int, n_types: int) -> None:
    """The losers table (bid-row order, over budget overriding a later reason), the posted-price demand and the
    tie-order check."""
    rng = _rng(seed)
    won = rng.random(n) < 0.5
    reason, over = rng.integers(0, 6, n).astype(np.int8), rng.random(n) < 0.2
    kind, figure = rng.integers(-1, 3, n).astype(np.int32), rng.integers(0, 99, n)
    m = n - int(won.sum())
    out = (
        np.empty(m + 1, np.int64),
        np.empty(m + 1, np.int8),
        np.empty(m + 1, np.int32),
        np.empty(m + 1, np.int64),
    )
    k.loser_columns(won, (reason, over, kind, figure), out)
    lost = [i for i in range(n) if not won[i]]
    assert out[0][:m].tolist() == lost
    assert out[1][:m].tolist() == [k.OVER_BUDGET if over[i] else int(reason[i]) for i in lost]
    assert out[2][:m].tolist() == kind[lost].tolist() and out[3][:m].tolist() == figure[lost].tolist()

    limit = np.where(rng.random((n, n_types)) < 0.7, rng.integers(0, 9, (n, n_types)), -1).astype(np.int64)
    gpus, posted = rng.integers(1, 9, n).astype(np.int32), rng.integers(0, 9, n_types).astype(np.int64)
    want = [sum(int(gpus[r]) for r in range(n) if limit[r, t] >= posted[t]) for t in range(n_types)]
    assert k.demand_at(limit, gpus, posted).tolist() == want

    submit, jobs = np.sort(rng.integers(0, 4, n)).astype(np.int64), rng.integers(0, 9, n).astype(np.int64)
    pairs = list(zip(submit.tolist(), jobs.tolist(), strict=True))
    assert k.in_tie_order(submit, jobs) == all(a < b for a, b in zip(pairs, pairs[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 12), st.integers(0, 3))
def test_winner_columns_expand_the_log_one_row_per_gang(seed: int, n_gangs: int, n_explicit: int) -> None:
    """A gang's consecutive log entries (one per node) make one winner; explicit placements follow as tier G;
    a gappy node's offsets are looked up in its free-slot list."""
    rng = _rng(seed)
    gangs = rng.permutation(20)[:n_gangs]
    entries = [(int(r), int(j)) for r in gangs for j in rng.choice(3, int(rng.integers(1, 3)), replace=False)]
    row = np.array([e[0] for e in entries], dtype=np.int64)
    node = np.array([e[1] for e in entries], dtype=np.int64)
    count, offset = (
        rng.integers(1, 3, row.size).astype(np.int64),
        rng.integers(0, 3, row.size).astype(np.int64),
    )
    tier, kind = rng.integers(0, 3, row.size).astype(np.int8), rng.integers(0, 2, row.size).astype(np.int32)
    x_row = np.arange(20, 20 + n_explicit, dtype=np.int64)
    x_node, x_kind = (
        rng.integers(0, 3, n_explicit).astype(np.int64),
        rng.integers(0, 2, n_explicit).astype(np.int32),
    )
    x_slot, x_ptr = (
        np.arange(2 * n_explicit, dtype=np.int32),
        np.arange(0, 2 * n_explicit + 1, 2, dtype=np.int64),
    )
    gappy = np.array([False, True, False])
    free_slot, ptr = np.array([1, 3, 4, 6, 7, 8], dtype=np.int32), np.array([0, 0, 0, 6], dtype=np.int64)
    table = rng.integers(1, 10**6, 6).astype(np.int64)  # tier x type
    m, n_gpus = row.size + n_explicit, int(count.sum()) + x_slot.size
    out = (np.empty(m, np.int64), np.empty(m, np.int8), np.empty(m, np.int32), np.empty(m, np.int64))
    out = (*out, np.empty(m + 1, np.int64), np.empty(n_gpus, np.int32), np.empty(n_gpus, np.int32))
    w = k.winner_columns(
        (row, node, count, offset, tier, kind),
        (x_row, x_node, x_slot, x_ptr, x_kind),
        (gappy, ptr, free_slot),
        table,
        out,
    )
    want: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # row, tier, type, GPUs
    for i in range(row.size):
        gpus = [
            (int(node[i]), int(free_slot[offset[i] + c]) if gappy[node[i]] else int(offset[i] + c))
            for c in range(count[i])
        ]
        if i and row[i] == row[i - 1]:
            want[-1][3].extend(gpus)
        else:
            want.append((int(row[i]), int(tier[i]), int(kind[i]), gpus))
    for x in range(n_explicit):
        slots = x_slot[x_ptr[x] : x_ptr[x + 1]].tolist()
        want.append((int(x_row[x]), 0, int(x_kind[x]), [(int(x_node[x]), s) for s in slots]))
    o_row, o_tier, o_type, o_price, o_ptr, o_node, o_slot = out
    assert w == len(want)
    for v, (r, t, kd, gpus) in enumerate(want):
        assert (o_row[v], o_tier[v], o_type[v], o_price[v]) == (r, t, kd, table[t * 2 + kd])
        got = zip(
            o_node[o_ptr[v] : o_ptr[v + 1]].tolist(), o_slot[o_ptr[v] : o_ptr[v + 1]].tolist(), strict=True
        )
        assert list(got) == gpus


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 30), st.integers(1, 4))
def test_type_preferences_sort_eligible_types_by_margin(seed: int, n: int, n_types: int) -> None:
    rng = _rng(seed)
    limit = np.where(rng.random((n, n_types)) < 0.8, rng.integers(0, 9, (n, n_types)), -1).astype(np.int64)
    posted, reserve = (
        rng.integers(2, 6, n_types).astype(np.int64),
        rng.integers(0, 3, n_types).astype(np.int64),
    )
    out = np.empty((n, n_types), dtype=np.int32)
    k.type_preferences(limit, posted, reserve, out)
    for r in range(n):
        ok = sorted((int(posted[t] - limit[r, t]), t) for t in range(n_types) if limit[r, t] >= reserve[t])
        assert out[r].tolist() == [t for _, t in ok] + [-1] * (n_types - len(ok))
