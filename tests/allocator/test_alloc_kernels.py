"""The compiled loops of allocator/kernels.py against plain Python statements of the same rules.

The whole-round tests (tables, invariants, the slate) already run every kernel; these pin each rule on its own,
over random inputs, so that a kernel that drifts is named directly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import digest as dg
from allocator import kernels as k
from allocator import reclaim_kernels as rk
from allocator import settle as sk
from allocator.book import TIER_B, TIER_G, TIER_S, hold_of
from allocator.result import BELOW_RESERVE
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


def _sorted_water_fill(demand: np.ndarray, weight: np.ndarray, supply: int) -> np.ndarray:
    """Water-filling as first written: tenants by d/w ascending; the first whose ratio overshoots sets L."""
    if demand.sum() <= supply:
        return demand.copy()
    if supply <= 0:
        return np.zeros_like(demand)
    d, w = demand.astype(np.float64), weight
    order = np.argsort(d / w, kind="stable")
    r, ws, ds = (d / w)[order], w[order], d[order]
    filled = np.cumsum(ds) - ds + r * (ws.sum() - np.cumsum(ws) + ws)
    i = int(np.searchsorted(filled, supply, side="right"))
    level = (supply - ds[:i].sum()) / ws[i:].sum()
    share = np.minimum(demand, np.floor(w * level + 1e-9)).astype(np.int64)
    for t in np.argsort(-share, kind="stable")[: max(0, int(share.sum()) - supply)]:
        share[t] -= 1
    return share


@settings(max_examples=300, deadline=None)
@given(SEEDS, st.integers(1, 40), st.integers(-3, 400), st.booleans())
def test_water_fill_matches_the_sorted_fill(seed: int, n: int, supply: int, whole: bool) -> None:
    """Saturating in rounds finds the level the sort finds: the same shares where the sums are exact (whole
    weights); with any weights, no share above its demand, nothing beyond the supply, and nobody short of
    its floor(w * L) by more than the one GPU float error may take back."""
    rng = _rng(seed)
    demand = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 40, n)).astype(np.int64)
    weight = rng.integers(1, 5, n).astype(np.float64) if whole else rng.uniform(0.1, 4.0, n)
    share = np.empty(n, dtype=np.int64)
    k.water_fill(demand, weight, supply, share)
    want = _sorted_water_fill(demand, weight, supply)
    if whole:
        assert (share == want).all()
    assert (share >= 0).all() and (share <= demand).all()
    assert int(share.sum()) <= max(supply, 0)
    assert (np.abs(share - want) <= 1).all()
    if demand.sum() > supply > 0:  # the supply is used up to the floors: at most one GPU per tenant unused
        assert int(share.sum()) >= supply - n


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
@given(SEEDS, st.integers(0, 100))
def test_placement_keys_order_groups_then_larger_gangs(seed: int, n: int) -> None:
    rng = _rng(seed)
    tier = rng.integers(-1, 3, n).astype(np.int8)
    gpus = rng.integers(1, 17, n).astype(np.int32)
    done = np.flatnonzero(rng.random(n) < 0.1)
    stride = int(gpus.max(initial=0)) + 1
    key = np.empty(n, dtype=np.int64)
    k.placement_keys(tier, gpus, done, stride, key)
    group = np.where(tier < 0, 3, tier)
    want = group * stride + stride - 1 - gpus
    want[done] = 5 * stride - 1
    assert (key == want).all()


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 200), st.booleans())
def test_split_rows_and_market_positions(seed: int, n: int, in_order: bool) -> None:
    rng = _rng(seed)
    total = max(n, 1) * 2
    rows = np.sort(rng.choice(total, n, replace=False)).astype(np.int64)
    price = rng.integers(0, 10, total).astype(np.int64)
    theta = int(rng.integers(0, 11))
    high, low = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    n_high = k.split_rows(rows, price, theta, high, low)
    high, low = high[:n_high], low[: n - n_high]
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
                if (
                    node not in freed
                    and running[node] + free[node] >= size
                    and w["reserved_for"][node] in (-1, job)
                ):
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
        "reserved_for": np.where(rng.random(n_nodes) < 0.1, rng.integers(100, 101 + n_gangs, n_nodes), -1),
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
        (got["free"], got["reserved_for"], got["initial_free"], got["slot_free"]),
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
        for mod in (k, rk, dg, sk)
        for n in dir(mod)
        if isinstance(getattr(mod, n), numba.core.registry.CPUDispatcher)
    }
    inlined = {
        "_loss",
        "_victim_order",
        "_candidate_nodes",
        "_plan_node",
        "_on_node",
        "_preferences_by_insertion",
        "best_fit_run",
        "fewest_free",
        "free_bitmaps",
        "narrow_into",
        "water_fill",
    }  # called by kernels only: compiled into their callers, so none of their own when those come from the cache
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
    job, tenant = rng.integers(1, 10**9, 30).astype(np.int64), rng.integers(0, 5, 30).astype(np.int32)
    max_s = rng.integers(1, 10**6, 30).astype(np.int64)
    by_winner = (np.empty(m, np.int64), np.empty(m, np.int32), np.empty(m, np.int64))
    w = k.winner_columns(
        (row, node, count, offset, tier, kind),
        (x_row, x_node, x_slot, x_ptr, x_kind),
        (gappy, ptr, free_slot),
        table,
        (job, tenant, max_s),
        out,
        by_winner,
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
        hold = (len(gpus) * int(table[t * 2 + kd]) * int(max_s[r]) + 3599) // 3600
        assert (by_winner[0][v], by_winner[1][v], by_winner[2][v]) == (job[r], tenant[r], hold)


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 30), st.integers(1, 5))
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


@settings(max_examples=200, deadline=None)
@given(SEEDS, st.integers(0, 5000), st.integers(0, 12), st.integers(1, 50))
def test_radix_sort_is_a_stable_sort_by_its_bits(seed: int, n: int, lo_bit: int, width: int) -> None:
    """Sorted by bits lo_bit..lo_bit+width-1; among equal such bits the keys keep their incoming order."""
    rng = _rng(seed)
    hi_bit = min(62, lo_bit + width)
    key = rng.integers(0, 1 << hi_bit, n, dtype=np.int64)
    if n and rng.random() < 0.5:  # many equal digits: passes get skipped
        key &= ~np.int64(((1 << 20) - 1) << lo_bit)
    want = key[np.argsort(key >> lo_bit, kind="stable")]
    k.radix_sort(key, lo_bit, hi_bit, np.empty_like(key))
    assert (key == want).all()


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(1, 20), st.integers(1, 3))
def test_unused_guarantee_and_largest_fit_match_numpy(seed: int, n: int, n_types: int) -> None:
    """The guarantee left per tenant (q minus all tiers held and won, at least 0), and the largest gang that
    could land: the most free on an open node, or a domain's wholly free open nodes together."""
    rng = _rng(seed)
    guarantee = rng.integers(0, 9, (n, n_types)).astype(np.int32)
    held, won = rng.integers(0, 4, (n, 3, n_types)).astype(np.int64), rng.integers(0, 4, (n, n_types))
    t, out = int(rng.integers(0, n_types)), np.empty(n, dtype=np.int64)
    total = k.unused_guarantee(guarantee, held, won.astype(np.int64), t, out)
    want = np.maximum(guarantee[:, t] - held[:, :, t].sum(axis=1) - won[:, t], 0)
    assert (out == want).all() and total == want.sum()
    capacity = rng.choice([4, 8], n).astype(np.int32)
    free = np.minimum(rng.integers(0, 9, n), capacity).astype(np.int64)
    reserved, domain = rng.random(n) < 0.2, rng.integers(0, 3, n).astype(np.int32)
    ix = np.flatnonzero(rng.random(n) < 0.7).astype(np.int64)
    open_ = ix[~reserved[ix]]
    whole = open_[free[open_] == capacity[open_]]
    per = np.bincount(domain[whole], weights=capacity[whole], minlength=1)
    want_fit = max(int(free[open_].max(initial=0)), int(per.max()))
    assert k.largest_fit(ix, free, reserved, capacity, domain) == want_fit


@settings(max_examples=200, deadline=None)
@given(
    SEEDS,
    st.integers(0, 40),
    st.sampled_from([1, 7, 8, 15, 16, 31, 32, 62]),
    st.sampled_from(["i1", "i4", "i8"]),
)
def test_narrow_into_writes_the_narrowest_little_endian_form(
    seed: int, n: int, bits: int, dtype: str
) -> None:
    """``digest.narrow_into``: the values read back, the narrowest width of 1, 2, 4, 8 bytes, zero padding to 8."""
    rng = _rng(seed)
    info = np.iinfo(dtype)
    lo, hi = max(-(1 << bits), int(info.min)), min((1 << bits) - 1, int(info.max))
    arr = rng.integers(lo, hi, n, endpoint=True).astype(dtype)
    body = np.full(8 + 8 * n + 8, 0xAB, dtype=np.uint8)
    width, end = dg.narrow_into(arr, body, 8)
    least = min(
        (
            w
            for w in (1, 2, 4, 8)
            if arr.size == 0 or np.iinfo(f"i{w}").min <= arr.min() and arr.max() <= np.iinfo(f"i{w}").max
        ),
        default=1,
    )
    assert width == least and end == 8 + (width * n + 7) // 8 * 8
    assert (body[8 : 8 + width * n].view(f"<i{width}") == arr).all()
    assert (body[8 + width * n : end] == 0).all() and (body[:8] == 0xAB).all() and (body[end:] == 0xAB).all()


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 30), st.integers(1, 10))
def test_free_slot_lookup_lists_the_slots_of_gappy_nodes(seed: int, n: int, width: int) -> None:
    rng = _rng(seed)
    free = rng.random((n, width)) < rng.choice([0.3, 0.9, 1.0], (n, 1))
    gappy, ptr = np.empty(n, dtype=np.bool_), np.empty(n + 1, dtype=np.int64)
    slots = np.empty(int(free.sum()), dtype=np.int32)
    m = k.free_slot_lookup(free, gappy, ptr, slots)
    want_gappy = [
        row.tolist() != [True] * int(row.sum()) + [False] * (width - int(row.sum())) for row in free
    ]
    assert gappy.tolist() == want_gappy
    want = [np.flatnonzero(row).tolist() if g else [] for row, g in zip(free, want_gappy, strict=True)]
    assert [slots[ptr[j] : ptr[j + 1]].tolist() for j in range(n)] == want and m == ptr[n]


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60))
def test_keep_rows_keeps_the_flagged_rows_in_order(seed: int, n: int) -> None:
    rng = _rng(seed)
    rows = np.sort(rng.choice(2 * n + 1, n, replace=False)).astype(np.int64)
    keep = rng.random(2 * n + 1) < 0.6
    out = np.empty(n, dtype=np.int64)
    m = k.keep_rows(rows, keep, out)
    assert out[:m].tolist() == [r for r in rows.tolist() if keep[r]]


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60))
def test_sold_out_split_keeps_who_may_win_and_notes_the_rest(seed: int, n: int) -> None:
    rng = _rng(seed)
    total, n_tenants, t, posted = 2 * n + 1, 4, 1, 5
    rows = np.sort(rng.choice(total, n, replace=False)).astype(np.int64)
    price = rng.integers(0, 10, total).astype(np.int64)
    tenant = rng.integers(0, n_tenants, total).astype(np.int32)
    gpus = rng.integers(1, 5, total).astype(np.int32)
    unused = rng.integers(0, 4, n_tenants).astype(np.int64)
    starving, skip = rng.random(total) < 0.1, rng.random(total) < 0.2
    reason, kind, figure = np.zeros(total, np.int8), np.full(total, -1, np.int32), np.zeros(total, np.int64)
    rest = np.empty(n, dtype=np.int64)
    m, lose = k.sold_out_split(
        rows, (price, tenant, gpus), unused, starving, (skip, reason, kind, figure), t, posted, rest
    )
    may = [r for r in rows.tolist() if gpus[r] <= unused[tenant[r]] or starving[r]]
    assert rest[:m].tolist() == may
    others = [r for r in rows.tolist() if r not in may]
    assert lose == max((int(price[r]) for r in others), default=-1)
    for r in range(total):
        noted = r in others and not skip[r]
        want = (k.GUARANTEE_FULL, posted) if price[r] < posted else (k.OUTBID, -1)
        assert (int(reason[r]), int(kind[r]), int(figure[r])) == (
            (*want[:1], t, want[1]) if noted else (0, -1, 0)
        )


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60))
def test_starving_order_is_competing_starving_gangs_longest_wait_first(seed: int, n: int) -> None:
    rng = _rng(seed)
    total, posted = 2 * n + 1, 5
    rows = rng.choice(total, n, replace=False).astype(np.int64)  # a slate: any order
    starving = rng.random(total) < 0.4
    waited = rng.integers(0, 4, total).astype(np.int32)
    tier = rng.integers(-1, 3, n).astype(np.int8)
    price = rng.integers(0, 10, n).astype(np.int64)
    out = np.empty(n, dtype=np.int64)
    m = k.starving_order(rows, starving, tier, price, posted, waited, out)
    competing = [i for i in range(n) if starving[rows[i]] and (tier[i] >= 0 or price[i] >= posted)]
    assert out[:m].tolist() == sorted(competing, key=lambda i: -int(waited[rows[i]]))


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 30), st.integers(1, 3))
def test_retier_leases_first_fits_the_oldest_leases_into_the_missing_guarantee(
    seed: int, n: int, n_types: int
) -> None:
    rng = _rng(seed)
    n_tenants = 3
    tenant = rng.integers(0, n_tenants, n).astype(np.int32)
    gpu_type = rng.integers(0, n_types, n).astype(np.int32)
    start = rng.integers(0, 4, n).astype(np.int64)
    lease = rng.permutation(n).astype(np.int64) + 1
    tier = rng.integers(0, 3, n).astype(np.int8)
    slot_ptr = np.concatenate([[0], np.cumsum(rng.integers(1, 4, n))]).astype(np.int64)
    gpus = np.diff(slot_ptr)
    guarantee = rng.integers(0, 6, (n_tenants, n_types)).astype(np.int32)
    held = np.zeros((n_tenants, 3, n_types), dtype=np.int64)
    np.add.at(held, (tenant, tier, gpu_type), gpus)
    want_held, want_tier = held.copy(), tier.copy()
    gap = {
        (m, t): max(int(guarantee[m, t]) - int(held[m, TIER_G, t]), 0)
        for m in range(3)
        for t in range(n_types)
    }
    want = []
    for v in sorted(range(n), key=lambda v: (tenant[v], gpu_type[v], start[v], lease[v])):
        key = (int(tenant[v]), int(gpu_type[v]))
        if tier[v] != TIER_G and gpus[v] <= gap[key]:
            gap[key] -= int(gpus[v])
            want.append(v)
            want_held[key[0], tier[v], key[1]] -= gpus[v]
            want_held[key[0], TIER_G, key[1]] += gpus[v]
            want_tier[v] = TIER_G
    z32 = np.zeros(0, np.int32)
    columns = (tenant, gpu_type, start, lease, np.ones(n, dtype=np.bool_), slot_ptr, z32, z32)
    got = rk.retier_leases(columns, guarantee, held, tier)
    assert (
        got.tolist() == want and held.tolist() == want_held.tolist() and tier.tolist() == want_tier.tolist()
    )


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 40), st.integers(1, 3))
def test_below_reserve_notes_the_lowest_reserve_of_the_accepted_types(
    seed: int, n: int, n_types: int
) -> None:
    rng = _rng(seed)
    limit = np.where(rng.random((n, n_types)) < 0.7, rng.integers(0, 5, (n, n_types)), -1).astype(np.int64)
    reserve = rng.integers(1, 4, n_types).astype(np.int64)
    first = np.where(rng.random(n) < 0.5, -1, 0).astype(np.int32)
    reason, kind, figure = np.zeros(n, np.int8), np.full(n, -1, np.int32), np.zeros(n, np.int64)
    k.below_reserve(first, limit, reserve, (reason, kind, figure))
    for i in range(n):
        accepted = [t for t in range(n_types) if limit[i, t] >= 0]
        low = min((int(reserve[t]) for t in accepted), default=np.iinfo(np.int64).max)
        best = next((t for t in accepted if reserve[t] == low), 0)
        want = (BELOW_RESERVE, best, low) if first[i] < 0 else (0, -1, 0)
        assert (int(reason[i]), int(kind[i]), int(figure[i])) == want


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60), st.integers(1, 4))
def test_split_by_type_groups_rows_by_type_in_order(seed: int, n: int, n_types: int) -> None:
    rng = _rng(seed)
    rows = np.sort(rng.choice(2 * n + 1, n, replace=False)).astype(np.int64)
    choice = rng.integers(0, n_types, 2 * n + 1).astype(np.int32)
    out = np.empty(n, dtype=np.int64)
    start = k.split_by_type(rows, choice, n_types, out)
    for t in range(n_types):
        assert out[start[t] : start[t + 1]].tolist() == [r for r in rows.tolist() if choice[r] == t]


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 40))
def test_spend_holds_takes_each_winners_limit_hold_off_its_tenant(seed: int, n: int) -> None:
    rng = _rng(seed)
    total, n_tenants = 2 * n + 1, 3
    won = rng.choice(total, n, replace=False).astype(np.int64)
    tenant = rng.integers(0, n_tenants, total).astype(np.int32)
    gpus = rng.integers(1, 9, total).astype(np.int32)
    max_s = rng.integers(1, 10**5, total).astype(np.int64)
    price = rng.integers(0, 10**7, total).astype(np.int64)
    budget = np.full(n_tenants, 10**15, dtype=np.int64)
    want = budget.copy()
    for r in won.tolist():
        want[tenant[r]] -= int(hold_of(int(gpus[r]), int(price[r]), int(max_s[r])))
    k.spend_holds(won, (tenant, gpus, max_s), price, budget)
    assert budget.tolist() == want.tolist()


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 30), st.integers(1, 9))
def test_open_free_and_roomiest_node(seed: int, n: int, k_: int) -> None:
    rng = _rng(seed)
    total = n + 3
    ix = np.sort(rng.choice(total, n, replace=False)).astype(np.int64)
    free = rng.integers(0, 9, total).astype(np.int64)
    reserved, touched = rng.random(total) < 0.3, rng.random(total) < 0.3
    capacity = rng.choice([4, 8], total).astype(np.int32)
    assert k.open_free(ix, free, reserved) == sum(int(free[j]) for j in ix.tolist() if not reserved[j])
    ok = [j for j in ix.tolist() if not reserved[j] and not touched[j] and capacity[j] >= k_]
    want = max(ok, key=lambda j: (int(free[j]), -j)) if ok else -1
    assert k.roomiest_node(ix, free, reserved, touched, capacity, k_) == want


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60), st.integers(1, 4))
def test_nodes_by_type_groups_nodes_and_finds_the_largest(seed: int, n: int, n_types: int) -> None:
    rng = _rng(seed)
    gpu_type = rng.integers(0, n_types, n).astype(np.int32)
    capacity = rng.choice([4, 8, 16], n).astype(np.int32)
    order = np.empty(n, dtype=np.int64)
    start, max_cap = k.nodes_by_type(gpu_type, capacity, n_types, order)
    for t in range(n_types):
        mine = [j for j in range(n) if gpu_type[j] == t]
        assert order[start[t] : start[t + 1]].tolist() == mine
        assert max_cap[t] == max((int(capacity[j]) for j in mine), default=0)


@settings(max_examples=100, deadline=None)
@given(SEEDS, st.integers(0, 60), st.integers(1, 3), st.booleans())
def test_pass_columns_lists_the_bids_still_pending_in_a_pass(
    seed: int, n: int, n_types: int, with_columns: bool
) -> None:
    """The rows of each pass, and where asked (several types) the choice and price columns by bid row."""
    rng = _rng(seed)
    limit = rng.integers(1, 99, (n, n_types)).astype(np.int64)
    prefs = np.full((n, n_types), -1, dtype=np.int32)
    for r in range(n):  # eligible types first, then -1 padding, as tiers.preference_order gives them
        ok = rng.permutation(n_types)[: int(rng.integers(0, n_types + 1))]
        prefs[r, : ok.size] = ok
    won = rng.random(n) < 0.3
    for j in range(n_types):
        size = n if with_columns else 0
        rows, choice, price = np.empty(n, np.int64), np.empty(size, np.int32), np.empty(size, np.int64)
        m = k.pass_columns(prefs, j, limit, won, rows, choice, price)
        want = [r for r in range(n) if prefs[r, j] >= 0 and not won[r]]
        assert rows[:m].tolist() == want
        if with_columns:
            assert choice.tolist() == prefs[:, j].tolist()
            assert price.tolist() == [int(limit[r, prefs[r, j]]) if r in want else 0 for r in range(n)]
