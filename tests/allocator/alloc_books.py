"""Random order books for the allocator's property tests (hypothesis draws the shape, numpy fills it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from allocator import MICRO, Bids, Book, GpuTypes, Leases, Nodes, Policy, Tenants


@dataclass(frozen=True)
class Shape:
    n_types: int
    n_tenants: int
    n_nodes: int
    n_bids: int
    seed: int
    rich: bool  # every tenant can pay for every bid


def shapes(max_types: int = 3, *, rich: bool | None = None) -> st.SearchStrategy[Shape]:
    return st.builds(
        Shape,
        st.integers(1, max_types),
        st.integers(1, 50),
        st.integers(1, 12),
        st.integers(0, 80),
        st.integers(0, 2**32 - 1),
        st.booleans() if rich is None else st.just(rich),
    )


def _leases(
    rng: np.random.Generator, free: np.ndarray, gtype: np.ndarray, n_tenants: int, now: int
) -> Leases:
    """Occupy some slots with leases of 1..4 GPUs on one node."""
    lease: list[int] = []
    tenant: list[int] = []
    ltype: list[int] = []
    tier: list[int] = []
    start: list[int] = []
    pre: list[bool] = []
    ptr, snode, sidx = [0], [], []
    for node in range(free.shape[0]):
        slots = np.flatnonzero(free[node])
        while slots.size and rng.random() < 0.35:
            k = int(rng.integers(1, min(4, slots.size) + 1))
            take, slots = slots[:k], slots[k:]
            free[node, take] = False
            lease.append(len(lease) + 1)
            tenant.append(int(rng.integers(0, n_tenants)))
            ltype.append(int(gtype[node]))
            tier.append(int(rng.integers(0, 3)))
            start.append(now - int(rng.choice([60, 3600, 86400])))
            pre.append(tier[-1] != 0)
            snode += [node] * k
            sidx += take.tolist()
            ptr.append(ptr[-1] + k)
    if not lease:
        return Leases.empty()
    return Leases(
        np.array(lease, dtype=np.int64),
        np.array(tenant, dtype=np.int32),
        np.array(ltype, dtype=np.int32),
        np.array(tier, dtype=np.int8),
        np.array(start, dtype=np.int64),
        np.array(pre, dtype=bool),
        np.array(ptr, dtype=np.int64),
        np.array(snode, dtype=np.int32),
        np.array(sidx, dtype=np.int32),
    )


def make_book(s: Shape) -> Book:
    """A book of the given shape: nodes of 4 or 8 GPUs in 1-3 domains, partly held by leases; gangs 1-16."""
    rng = np.random.default_rng(s.seed)
    now = 1_000_000
    cap = rng.choice([4, 8], s.n_nodes)
    gtype = rng.integers(0, s.n_types, s.n_nodes)
    gtype[: s.n_types] = np.arange(min(s.n_types, s.n_nodes))
    free = np.arange(8)[None, :] < cap[:, None]
    leases = _leases(rng, free, gtype, s.n_tenants, now)
    held = np.zeros((s.n_tenants, 3, s.n_types), dtype=np.int32)
    owner = leases.slot_owner
    np.add.at(held, (leases.tenant[owner], leases.tier[owner], leases.gpu_type[owner]), 1)
    reserve = rng.integers(1, 4, s.n_types) * MICRO
    posted = reserve + rng.integers(0, 3, s.n_types) * MICRO
    types = GpuTypes(tuple(f"g{t}" for t in range(s.n_types)), reserve, posted, posted * 4)
    guarantee = np.where(
        rng.random((s.n_tenants, s.n_types)) < 0.3, rng.integers(1, 9, (s.n_tenants, s.n_types)), 0
    )
    balance = (
        np.full(s.n_tenants, 10**15)
        if s.rich
        else rng.choice([0, 5 * MICRO, 50 * MICRO, 10**15], s.n_tenants)
    )
    guardrail = np.full(s.n_tenants, -1) if s.rich else rng.choice([-1, -1, 20 * MICRO], s.n_tenants)
    tenants = Tenants(
        tuple(f"t{i}" for i in range(s.n_tenants)),
        rng.integers(1, 5, s.n_tenants).astype(float),
        guarantee,
        held,
        balance,
        guardrail,
    )
    gpus = np.where(rng.random(s.n_bids) < 0.6, 1, rng.integers(2, 17, s.n_bids))
    limit = rng.integers(0, 7, (s.n_bids, s.n_types)) * MICRO + rng.integers(0, 3, (s.n_bids, s.n_types))
    accept = rng.random((s.n_bids, s.n_types)) < 0.7
    if s.n_bids:
        accept[np.arange(s.n_bids), rng.integers(0, s.n_types, s.n_bids)] = True
    bids = Bids(
        job=rng.permutation(s.n_bids) + 100,
        tenant=rng.integers(0, s.n_tenants, s.n_bids).astype(np.int32),
        gpus=gpus,
        limit=np.where(accept, limit, -1).reshape(s.n_bids, s.n_types),
        max_s=rng.integers(1, 5, s.n_bids) * 3600,
        submit=rng.integers(0, 5, s.n_bids),
        waited=rng.choice([0, 0, 0, 9], s.n_bids),
    )
    nodes = Nodes(
        tuple(f"n{i}" for i in range(s.n_nodes)),
        gtype.astype(np.int32),
        rng.integers(0, 3, s.n_nodes).astype(np.int32),
        cap.astype(np.int32),
        free,
    )
    policy = Policy(min_runtime_s=600, starve_rounds=5, price_step_bp=500, max_reservations=2)
    leases, tenants, bids = _forecasts(np.random.default_rng(s.seed + 1), now, leases, tenants, bids)
    return Book(
        now=now, round=3, types=types, nodes=nodes, tenants=tenants, bids=bids, leases=leases, policy=policy
    )


def _forecasts(
    rng: np.random.Generator, now: int, leases: Leases, tenants: Tenants, bids: Bids
) -> tuple[Leases, Tenants, Bids]:
    """What reservations and backfill read, from a generator of their own (the draws above stay as they were):
    expected ends of leases (some unknown, some past), backfill marks, predicted runtimes of bids, and a
    fair-share history in which some tenants are owed."""
    n = len(leases)
    if n:
        ends = np.where(rng.random(n) < 0.2, -1, now + rng.integers(-1800, 4 * 3600, n))
        leases = dataclasses.replace(leases, expect_end=ends, backfill=rng.random(n) < 0.2)
    owed = np.where(rng.random(tenants.owed.shape) < 0.4, rng.integers(-8, 40, tenants.owed.shape), 0)
    tenants = dataclasses.replace(tenants, owed=owed.astype(np.float64))
    expect = np.maximum(1, (bids.max_s * rng.uniform(0.05, 1.0, len(bids))).astype(np.int64))
    return leases, tenants, dataclasses.replace(bids, expect_s=expect)


def make_hoarded_book(s: Shape, *, hoarders: int = 1, full: bool = False) -> Book:
    """``make_book``'s shape where tenant 0 (weight 1, no guarantee) holds every running lease in tier B, past the
    minimum runtime, and every posted price sits at the reserve: fair reclaim has work in most such books.
    ``hoarders``: tenants 0.. (each weight 1, no guarantee) hold the leases in turn. ``full``: every GPU is held
    instead, each two nodes of a type by one lease (as a gang larger than a node runs) or by a lease on each
    half of each node, so gangs larger than a node are placed only by reclaim."""
    from dataclasses import replace

    book = make_book(s)
    ls = _fill(book.nodes, np.random.default_rng(s.seed)) if full else book.leases
    if not len(ls):
        return book
    n = len(ls)
    leases = Leases(
        ls.lease,
        ((ls.tenant if full else np.arange(n)) % min(hoarders, s.n_tenants)).astype(np.int32),
        ls.gpu_type,
        np.full(n, 1, dtype=np.int8),
        np.full(n, book.now - 86400),
        np.ones(n, dtype=bool),
        ls.slot_ptr,
        ls.slot_node,
        ls.slot_idx,
    )
    held = np.zeros_like(book.tenants.held)
    np.add.at(held[:, 1, :], (leases.tenant[leases.slot_owner], leases.gpu_type[leases.slot_owner]), 1)
    guarantee = book.tenants.guarantee.copy()
    guarantee[:hoarders] = 0
    weight = book.tenants.weight.copy()
    weight[:hoarders] = 1.0
    t = book.tenants
    tenants = Tenants(t.names, weight, guarantee, held, t.balance, t.guardrail)
    nodes = replace(book.nodes, free=np.zeros_like(book.nodes.free)) if full else book.nodes
    types = GpuTypes(book.types.names, book.types.reserve, book.types.reserve, book.types.max_price)
    return replace(book, types=types, nodes=nodes, tenants=tenants, leases=leases)


def _fill(nodes: Nodes, rng: np.random.Generator) -> Leases:
    """Leases over every GPU of ``nodes`` (tier and the rest filled in by the caller): the nodes of each type in
    pairs, each pair one lease or, at random, each node as two leases of half its GPUs; ``tenant`` numbers the
    pairs (the caller's owner: the pair's number modulo the hoarders)."""
    parts: list[tuple[int, list[tuple[int, int]]]] = []  # (type, [(node, slot), ...])
    pair_of: list[int] = []
    for t in np.unique(nodes.gpu_type).tolist():
        ix = np.flatnonzero(nodes.gpu_type == t).tolist()
        for pair in (ix[i : i + 2] for i in range(0, len(ix), 2)):
            gpus = [[(n, x) for x in range(int(nodes.capacity[n]))] for n in pair]
            if len(pair) == 2 and rng.random() < 0.5:
                parts.append((t, gpus[0] + gpus[1]))
            else:
                parts += [(t, g[h::2]) for g in gpus for h in (0, 1)]
            pair_of += [len(set(pair_of))] * (len(parts) - len(pair_of))
    ptr = np.r_[0, np.cumsum([len(g) for _, g in parts])]
    return Leases(
        np.arange(len(parts)) + 1,
        np.array(pair_of, dtype=np.int32),
        np.array([t for t, _ in parts], dtype=np.int32),
        np.ones(len(parts), dtype=np.int8),
        np.zeros(len(parts), dtype=np.int64),
        np.ones(len(parts), dtype=bool),
        ptr,
        np.array([n for _, g in parts for n, _ in g], dtype=np.int32),
        np.array([x for _, g in parts for _, x in g], dtype=np.int32),
    )
