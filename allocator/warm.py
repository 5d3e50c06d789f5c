"""Compile (or load from the cache) every kernel of the allocator before the first real round needs it."""

from __future__ import annotations

import numpy as np

from allocator.book import MICRO, Bids, Book, GpuTypes, Leases, Nodes, Policy, Tenants
from allocator.clearing import PRUNE_MIN, clear
from allocator.result import Result


def warm_up() -> Result:
    """Clear a synthetic book large enough for the slate (``PRUNE_MIN`` bids in a type) and varied enough to
    reach every kernel: three GPU types, guarantees, a tenant short of budget, gangs of several sizes, a
    starving gang, running leases, and in the third type (one node, mostly leased) a guarantee restored by
    preemption and one that cannot be. Takes under a second with the kernels cached, a few seconds without.

    Why: numba compiles each kernel on its first call. A Celery worker calls this when it starts
    (``config/celery.py``), so no round pays for it; the round benchmark does the same."""
    rng = np.random.default_rng(0)
    # a third are the poor tenant's, and its budget turns most of them away: type "a" keeps some 40,000 (two
    # thirds try it first), enough for a slate; with twice PRUNE_MIN bids it kept fewer than PRUNE_MIN
    n_bids, n_nodes, now = 3 * PRUNE_MIN, 512, 1_700_000_000
    free = np.ones((n_nodes + 1, 8), dtype=np.bool_)
    free[0, :2] = False
    free[n_nodes, 2:] = False  # the third type's one node: six GPUs leased by "poor" (tier S)
    i64, i32 = np.int64, np.int32
    leases = Leases(
        lease=np.array([1, 2], dtype=i64),
        tenant=np.array([1, 2], dtype=i32),
        gpu_type=np.array([0, 2], dtype=i32),
        tier=np.array([2, 2], dtype=np.int8),
        start=np.array([now - 7200, now - 7200], dtype=i64),
        preemptible=np.array([True, True]),
        slot_ptr=np.array([0, 2, 8], dtype=i64),
        slot_node=np.array([0, 0] + [n_nodes] * 6, dtype=i32),
        slot_idx=np.array([0, 1, 2, 3, 4, 5, 6, 7], dtype=i32),
    )
    held = np.zeros((3, 3, 3), dtype=i32)
    held[1, 2, 0] = 2
    held[2, 2, 2] = 6
    limit = np.hstack([rng.integers(MICRO, 4 * MICRO, (n_bids, 2)), np.full((n_bids, 1), -1)])  # "c": none
    # "a" first for two thirds (one type gets a slate), "b" first for the rest; both sell out in the first
    # pass, so the second finds them sold out
    limit[:, 1] = np.choose(np.arange(n_bids) % 3, [np.full(n_bids, -1), limit[:, 0] + 1, limit[:, 0] - 1])
    tenant = rng.integers(0, 3, n_bids).astype(i32)
    gpus = np.where(rng.random(n_bids) < 0.8, 1, rng.integers(2, 17, n_bids)).astype(i32)
    # but two gangs of "rich", a node each, within its guarantee: the first preempts, the second finds nothing;
    # and one of "lender" larger than the node, so "c" is cleared step by step (clearing.settle takes the rest)
    tenant[1:3], gpus[1:3] = 0, 8
    limit[1:3] = [-1, -1, 2 * MICRO]
    tenant[3], gpus[3], limit[3] = 1, 16, [-1, -1, 2 * MICRO]
    book = Book(
        now=now,
        round=1,
        types=GpuTypes(("a", "b", "c"), np.full(3, MICRO), np.full(3, 2 * MICRO), np.full(3, 50 * MICRO)),
        nodes=Nodes(
            tuple(f"n{i}" for i in range(n_nodes + 1)),
            np.append(np.arange(n_nodes) % 2, 2).astype(i32),
            (np.arange(n_nodes + 1) // 64).astype(i32),
            np.full(n_nodes + 1, 8, dtype=i32),
            free,
        ),
        tenants=Tenants(
            ("rich", "lender", "poor"),
            np.array([1.0, 2.0, 1.0]),
            np.array([[16, 0, 16], [4, 4, 0], [0, 0, 0]]),
            held,
            np.array([10**9 * MICRO, 10**9 * MICRO, 100 * MICRO]),
            np.array([-1, -1, -1]),
        ),
        bids=Bids(
            job=np.arange(n_bids) + 1,
            tenant=tenant,
            gpus=gpus,
            limit=limit,
            max_s=np.full(n_bids, 3600),
            submit=now - n_bids + np.arange(n_bids),
            waited=np.where(np.arange(n_bids) % 5000 == 7, 10, 0).astype(i32),
        ),
        leases=leases,
        policy=Policy(min_runtime_s=600),
    )
    clear(_reservation_book(larger=False))
    clear(_reservation_book(larger=True))
    return clear(book)


def _reservation_book(*, larger: bool) -> Book:
    """One node of eight GPUs, six of them free, and a starving gang of eight: it does not fit, so a node is
    reserved for it (``kernels.roomiest_node``), which the large book never needs. With a ``larger`` gang than
    the node beside it, step by step; else in one call (``clearing.settle``)."""
    now, n = 1_700_000_000, 2 if larger else 1
    return Book(
        now=now,
        round=1,
        types=GpuTypes(("a",), np.array([MICRO]), np.array([MICRO]), np.array([50 * MICRO])),
        nodes=Nodes(
            ("n0",),
            np.zeros(1, np.int32),
            np.zeros(1, np.int32),
            np.full(1, 8, np.int32),
            np.arange(8)[None, :] >= 2,
        ),
        tenants=Tenants(
            ("t",),
            np.ones(1),
            np.zeros((1, 1), np.int64),
            np.zeros((1, 3, 1), np.int64),
            np.array([10**9 * MICRO]),
            np.array([-1]),
        ),
        bids=Bids(
            job=np.array([1, 2][:n]),
            tenant=np.zeros(n, np.int32),
            gpus=np.array([8, 16][:n], np.int32),
            limit=np.full((n, 1), 2 * MICRO),
            max_s=np.full(n, 3600),
            submit=np.full(n, now - 60),
            waited=np.array([10, 0][:n], np.int32),
        ),
        leases=Leases.empty(),
        policy=Policy(),
    )
