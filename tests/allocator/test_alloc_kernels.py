"""The compiled loops of allocator/kernels.py against plain Python statements of the same rules.

The whole-round tests (tables, invariants, the slate) already run every kernel; these pin each rule on its own,
over random inputs, so that a kernel that drifts is named directly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import kernels as k
from allocator import reclaim_kernels as rk
from allocator.book import TIER_B, TIER_G, TIER_S
from allocator.tiers import Ranks, market_positions

SEEDS = st.integers(0, 2**32 - 1)
LEASE_COLUMNS = ("tenant", "gpu_type", "start", "lease", "preemptible", "slot_ptr", "slot_node", "slot_idx")
STATE_COLUMNS = ("lease_tier", "preempted", "preempted_for", "held", "share", "guarantee", "failed")


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


def _reclaim_reference(
    t: int,
    max_cap: int,
    gangs: list[tuple[int, int, int]],
    ls: dict[str, np.ndarray],
    w: dict[str, np.ndarray],
) -> list[tuple[int, list[int]] | None]:
    """Reclaim (ARCHITECTURE.md §Clearing step 6) stated gang by gang, the victim order recomputed for each:
    per gang (size, tenant, job) its node and slots, or None; ``w`` (the round's state) is updated in place."""
    now, min_runtime = 10_000, 600
    n = len(ls["lease"])
    slots = [range(int(ls["slot_ptr"][v]), int(ls["slot_ptr"][v + 1])) for v in range(n)]
    held, q, free = w["held"], w["guarantee"], w["free"]
    out: list[tuple[int, list[int]] | None] = []
    for size, m, job in gangs:
        if size > max_cap or w["failed"][m, t] <= size:
            out.append(None)
            continue
        ok = [
            v
            for v in range(n)
            if not w["preempted"][v]
            and ls["gpu_type"][v] == t
            and ls["preemptible"][v]
            and w["lease_tier"][v] in (TIER_B, TIER_S)
            and now - ls["start"][v] >= min_runtime
            and ls["tenant"][v] != m
        ]

        def above(v: int) -> int:
            return int(held[ls["tenant"][v], TIER_B, t] - w["share"][ls["tenant"][v], t])

        victims = sorted(
            ok, key=lambda v: (w["lease_tier"][v] != TIER_S, -above(v), -ls["start"][v], ls["lease"][v])
        )
        freed: dict[int, int] = {}  # node -> the victims' GPUs there, in order, until the gang fits
        running: dict[int, int] = {}
        for v in victims:
            for s in slots[v]:
                node = int(ls["slot_node"][s])
                running[node] = running.get(node, 0) + 1
                if node not in freed and running[node] + free[node] >= size and not w["reserved"][node]:
                    freed[node] = running[node]
        plan = None
        for node in sorted(freed, key=lambda j: (freed[j], j)):
            have, taken, chosen = int(free[node]), dict.fromkeys(range(q.shape[0]), 0), []
            for v in victims:
                if have >= size:
                    break
                on = sum(int(ls["slot_node"][s] == node) for s in slots[v])
                mv, g = int(ls["tenant"][v]), len(slots[v])
                if on == 0 or int(held[mv, :, t].sum()) - taken[mv] - g < q[mv, t]:
                    continue
                taken[mv] += g
                chosen.append(v)
                have += on
            if have >= size:
                plan = (node, chosen)
                break
        if plan is None:
            w["failed"][m, t] = min(int(w["failed"][m, t]), size)
            out.append(None)
            continue
        node, chosen = plan
        from_free = min(int(free[node]), size)
        used = int(w["initial_free"][node] - free[node])
        free_slots = [s for s in range(w["slot_free"].shape[1]) if w["slot_free"][node, s]]
        extra = sorted(int(ls["slot_idx"][s]) for v in chosen for s in slots[v] if ls["slot_node"][s] == node)
        for v in chosen:
            w["preempted"][v], w["preempted_for"][v] = True, job
            held[ls["tenant"][v], w["lease_tier"][v], t] -= len(slots[v])
        free[node] -= from_free
        out.append((node, free_slots[used : used + from_free] + extra[: size - from_free]))
    return out


@settings(max_examples=300, deadline=None)
@given(SEEDS, st.integers(1, 8), st.integers(0, 16))
def test_reclaim_run_is_gang_by_gang_reclaim(seed: int, n_nodes: int, n_gangs: int) -> None:
    """Leases of random tiers, ages, tenants and spans (some over several nodes) on a few nodes; gangs of random
    sizes and tenants in turn, against the rule restated gang by gang."""
    rng = _rng(seed)
    width, n_tenants, t = 8, 4, 0
    slot_free = rng.random((n_nodes, width)) < 0.15
    busy = np.argwhere(~slot_free)  # by node, each lease a run of them: a few runs go on to the next node
    busy = busy[np.argsort(busy[:, 0] + 1.2 * rng.random(busy.shape[0]), kind="stable")]
    first = rng.random(busy.shape[0]) < 0.5
    first[:1] = True
    n = int(first.sum())
    slot_ptr = np.append(np.flatnonzero(first), busy.shape[0]).astype(np.int64)
    ls = {
        "tenant": rng.integers(0, n_tenants, n).astype(np.int32),
        "gpu_type": (rng.random(n) < 0.1).astype(np.int32),
        "start": rng.integers(8_000, 10_000, n).astype(np.int64),
        "lease": rng.permutation(n).astype(np.int64) + 1,
        "preemptible": rng.random(n) < 0.9,
        "slot_ptr": slot_ptr,
        "slot_node": busy[:, 0].astype(np.int32),
        "slot_idx": busy[:, 1].astype(np.int32),
    }
    # mostly tier B, whose preemption moves the victim order
    lease_tier = rng.choice(np.array([TIER_G, TIER_B, TIER_S], dtype=np.int8), n, p=[0.1, 0.7, 0.2])
    held = rng.integers(0, 3, (n_tenants, 3, 2)).astype(np.int64)
    for v in range(n):
        held[ls["tenant"][v], lease_tier[v], ls["gpu_type"][v]] += ls["slot_ptr"][v + 1] - ls["slot_ptr"][v]
    initial_free = slot_free.sum(axis=1).astype(np.int64)
    w = {
        "lease_tier": lease_tier,
        "preempted": rng.random(n) < 0.1,
        "preempted_for": np.full(n, -1, dtype=np.int64),
        "held": held,
        "share": rng.integers(0, 6, (n_tenants, 2)).astype(np.int64),
        "guarantee": rng.integers(0, 7, (n_tenants, 2)).astype(np.int32),
        "failed": np.where(rng.random((n_tenants, 2)) < 0.2, 3, np.iinfo(np.int64).max).astype(np.int64),
        "free": initial_free - rng.integers(0, initial_free + 1),
        "reserved": rng.random(n_nodes) < 0.1,
        "initial_free": initial_free,
        "slot_free": slot_free,
    }
    gpus = np.where(rng.random(n_gangs) < 0.1, width + 1, rng.integers(1, 6, n_gangs)).astype(np.int32)
    tenant = rng.integers(0, n_tenants, n_gangs).astype(np.int32)
    job = np.arange(n_gangs, dtype=np.int64) + 100
    got = {name: a.copy() for name, a in w.items()}
    node, slots = np.empty(n_gangs, dtype=np.int64), np.empty((n_gangs, width), dtype=np.int64)
    rk.reclaim_run(
        t,
        width,
        (np.arange(n_gangs, dtype=np.int64), gpus, tenant, job),
        tuple(ls[c] for c in LEASE_COLUMNS),
        (10_000, 600),
        tuple(got[c] for c in STATE_COLUMNS),
        (got["free"], got["reserved"], got["initial_free"], got["slot_free"]),
        node,
        slots,
    )
    want = _reclaim_reference(
        t, width, list(zip(gpus.tolist(), tenant.tolist(), job.tolist(), strict=True)), ls, w
    )
    assert [None if j < 0 else (j, slots[i, : gpus[i]].tolist()) for i, j in enumerate(node.tolist())] == want
    assert all((got[name] == w[name]).all() for name in w)


def test_warm_up_reaches_every_kernel() -> None:
    """A Celery worker calls ``warm_up`` when it starts so that no round compiles a kernel; it must call each."""
    import numba

    from allocator import warm_up

    result = warm_up()
    assert len(result.winners) and len(result.losers) and result.counters["starving_placed"]
    assert result.counters["reclaimed_gangs"] and result.counters["guarantee_unrestored"]
    kernels = {
        n: getattr(mod, n)
        for mod in (k, rk)
        for n in dir(mod)
        if isinstance(getattr(mod, n), numba.core.registry.CPUDispatcher)
    }
    inlined = {
        "_loss",
        "_victim_order",
        "_candidate_nodes",
        "_plan_node",
        "_on_node",
    }  # called by kernels only
    assert [n for n, f in kernels.items() if not f.signatures and n not in inlined] == []
