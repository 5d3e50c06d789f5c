"""The frozen input of one round, read from the database in a handful of queries (ARCHITECTURE.md §Clearing).

Names in the book are the database's natural keys (GPU type name, node name, tenant slug; slots are GPU
indices; job and lease ids are primary keys), so the round commit can map a result back even when it resumes
from a stored snapshot in another process.
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection

from accounts.models import Tenant
from allocator import NO_PRICE, TIER_NAMES, Bids, Book, GpuTypes, Leases, Nodes, Tenants
from allocator.lost import lost_since
from allocator.predict import RuntimeHistory
from inventory.models import Gpu, GpuType, Node
from market import bulk
from market.models import (
    LIVE_LEASE_STATES,
    Account,
    AccountKind,
    FairShareUsage,
    Guarantee,
    Job,
    JobState,
    LeaseGpu,
    MarketPolicy,
)
from market.selectors.holds import sized_hold_seconds
from market.selectors.lost_work import book_seconds
from market.selectors.predictions import (
    BookLease,
    book_history,
    done_seconds,
    expected_ends,
    expected_runtimes,
)
from market.selectors.waiting import rounds_waited_before

_TIER_INDEX = {name: i for i, name in enumerate(TIER_NAMES)}


@dataclass(frozen=True)
class Snapshot:
    """A book plus what the commit needs and the book cannot carry: each bid's version at the freeze."""

    book: Book
    bid_versions: dict[int, int]

    def dump(self) -> bytes:
        doc = {"book": self.book.to_json(), "bid_versions": self.bid_versions}
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)

    @classmethod
    def load(cls, blob: bytes | memoryview | None) -> Snapshot:
        """From dump's bytes, or a round's stored book (Round.book, null before its freeze)."""
        if blob is None:
            raise ValueError("no book: the round was never frozen")
        doc = json.loads(zlib.decompress(blob))
        versions = {int(job): int(v) for job, v in doc["bid_versions"].items()}
        return cls(book=Book.from_json(doc["book"]), bid_versions=versions)


def book_snapshot(*, round_id: int, now: datetime, policy: MarketPolicy) -> Snapshot:
    """Read GPU types, nodes, tenants, live leases and pending bids into an allocator Book."""
    types = list(GpuType.objects.order_by("name"))
    type_ix = {t.pk: i for i, t in enumerate(types)}
    gpu_types = GpuTypes(
        names=tuple(t.name for t in types),
        reserve=np.array([t.reserve_price for t in types], dtype=np.int64),
        posted=np.array([t.current_posted for t in types], dtype=np.int64),
        max_price=np.array([t.max_price for t in types], dtype=np.int64),
    )

    node_rows = list(
        Node.objects.order_by("name").values_list("pk", "name", "gpu_type_id", "topology_domain", "state")
    )
    domains = {d: i for i, d in enumerate(sorted({row[3] for row in node_rows}))}
    gpus = _gpus([row[0] for row in node_rows])
    capacity = np.zeros(len(node_rows), dtype=np.int32)
    np.maximum.at(capacity, gpus.node, gpus.index + 1)
    width = int(capacity.max()) if len(node_rows) else 0
    present = np.zeros((len(node_rows), width), dtype=np.bool_)
    # An unhealthy GPU, or one missing from its node's last registration, takes no new work.
    np.logical_or.at(present, (gpus.node, gpus.index), gpus.usable)

    tenants = list(
        Tenant.objects.filter(active=True).order_by("slug").values_list("pk", "slug", "weight", "guardrail")
    )
    tenant_ix = {pk: i for i, (pk, *_rest) in enumerate(tenants)}

    # Live leases and their GPUs. A stopping lease is not in the book: its GPUs are either still bound
    # (so not free) or already given to the lease that preempted it.
    bound = LeaseGpu.objects.filter(active=True, lease__state__in=LIVE_LEASE_STATES)
    lease_gpus: dict[int, list[tuple[int, int]]] = defaultdict(list)
    busy = np.zeros_like(present)
    busy[gpus.slots(list(LeaseGpu.objects.filter(active=True).values_list("gpu_id", flat=True)))] = True
    held_gpus = list(
        bound.order_by("lease_id", "gpu__node__name", "gpu__index").values_list("lease_id", "gpu_id")
    )
    slot_node, slot_idx = gpus.slots([gpu_id for _lease, gpu_id in held_gpus])
    for (lease_id, _gpu), node, index in zip(held_gpus, slot_node.tolist(), slot_idx.tolist(), strict=True):
        lease_gpus[lease_id].append((node, index))
    lease_rows = [
        row
        for row in bound.values_list(
            "lease_id",
            "lease__tenant_id",
            "lease__gpu_type_id",
            "lease__tier",
            "lease__started_at",
            "lease__preemptible",
            "lease__last_checkpoint_at",
            "lease__backfill",
            "lease__running_at",
            "lease__max_seconds",
            "lease__tenant__slug",
            "lease__job__name",
            "lease__job__command",
            "lease__job__gpus",
        )
        .distinct()
        .order_by("lease_id")
        if row[1] in tenant_ix
    ]
    # One history of everybody's finished jobs predicts every lease's end and every bid's runtime, as the
    # estimated starts do (market.selectors.predictions): the book freezes the figures, so a re-clear agrees.
    history, empty = book_history()
    ends = expected_ends(
        leases=[BookLease(r[10], r[11], r[12], r[13], r[4], r[8], r[9]) for r in lease_rows],
        now=now,
        history=history,
    )
    leases = _leases(lease_rows, lease_gpus, tenant_ix, type_ix, book_seconds(now), ends)

    # Only an up node takes new work: not a down, draining or retired one.
    up = np.array([row[4] == Node.State.UP for row in node_rows], dtype=np.bool_)
    up &= ~_unconfined_unless_trusted_bid([row[0] for row in node_rows])
    nodes = Nodes(
        names=tuple(row[1] for row in node_rows),
        gpu_type=np.array([type_ix[row[2]] for row in node_rows], dtype=np.int32),
        domain=np.array([domains[row[3]] for row in node_rows], dtype=np.int32),
        capacity=np.maximum(capacity, 1),
        free=(present & ~busy & up[:, None]) if width else np.zeros((len(node_rows), 1), dtype=np.bool_),
    )

    held = np.zeros((len(tenants), 3, len(types)), dtype=np.int32)
    np.add.at(held, (leases.tenant, leases.tier, leases.gpu_type), leases.gpus.astype(np.int32))
    guarantee = np.zeros((len(tenants), len(types)), dtype=np.int32)
    for tenant_id, type_id, count in Guarantee.objects.values_list("tenant_id", "gpu_type_id", "gpus"):
        if tenant_id in tenant_ix:
            guarantee[tenant_ix[tenant_id], type_ix[type_id]] = count
    # Every available account, not a filter naming 10,000 tenants: the inactive few cost less than the list.
    balance = dict(Account.objects.filter(kind=AccountKind.AVAILABLE).values_list("tenant_id", "balance"))
    book_tenants = Tenants(
        names=tuple(slug for _pk, slug, _w, _g in tenants),
        weight=np.array([float(weight) for _pk, _s, weight, _g in tenants], dtype=np.float64),
        guarantee=guarantee,
        held=held,
        balance=np.array([balance.get(pk, 0) for pk, *_rest in tenants], dtype=np.int64),
        guardrail=np.array(
            [NO_PRICE if guardrail is None else guardrail for *_rest, guardrail in tenants], dtype=np.int64
        ),
        owed=_owed(tenant_ix, type_ix),
    )

    bids, versions = _bids(
        round_id, tenant_ix, {t.name: i for i, t in enumerate(types)}, len(types), history, empty
    )
    book = Book(
        now=book_seconds(now),
        round=round_id,
        types=gpu_types,
        nodes=nodes,
        tenants=book_tenants,
        bids=bids,
        leases=leases,
        policy=policy.book_policy(),
    )
    return Snapshot(book=book, bid_versions=versions)


# ---- issue 35 part 2: a node whose kernel refused the job sandbox takes only trusted tenants' jobs.
def _unconfined_unless_trusted_bid(node_ids: list[int]) -> np.ndarray:
    """Per node row: True for a node whose agent said the sandbox is unavailable, while no trusted tenant
    has a pending job; such a node is then offered to no one. While one does, it is offered, and the commit
    skips an untrusted winner placed on it (market.services.round_commit, SKIP_UNCONFINED). The book has
    no per-tenant node mask; this keeps the rule without one."""
    unconfined = set(Node.objects.filter(unconfined=True).values_list("pk", flat=True))
    if not unconfined:
        return np.zeros(len(node_ids), dtype=np.bool_)
    trusted_bids = Job.objects.filter(
        state=JobState.PENDING, tenant__trusted=True, tenant__active=True
    ).exists()
    return np.array([pk in unconfined and not trusted_bids for pk in node_ids], dtype=np.bool_)


@dataclass(frozen=True)
class _Gpus:
    """The nodes' GPUs as columns: each one's node (its row in the book's nodes), slot index, whether it takes
    work, and its id (sorted, to find a GPU's slot by id)."""

    pk: np.ndarray
    node: np.ndarray
    index: np.ndarray
    usable: np.ndarray

    def slots(self, gpu_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(node rows, slot indices) of these GPUs, for numpy indexing; every id must be one of the GPUs."""
        at = np.searchsorted(self.pk, np.asarray(gpu_ids, dtype=np.int64))
        if len(gpu_ids) and not np.array_equal(self.pk[np.minimum(at, len(self.pk) - 1)], gpu_ids):
            raise KeyError("a bound GPU is not on a node in the book")
        return self.node[at], self.index[at]


def _gpus(node_ids: list[int]) -> _Gpus:
    """The GPUs of these nodes (in this order: the book's node rows). Only these: an agent that registers
    between the two reads (each statement sees its own snapshot) joins the next round instead of failing this
    one. Read as rows of integers straight into numpy: 100,000 GPUs, no Python object per GPU."""
    rows = Gpu.objects.filter(node_id__in=bulk.any_of(node_ids)).values_list(
        "pk", "node_id", "index", "healthy", "absent"
    )
    table = np.array(list(rows), dtype=np.int64).reshape(-1, 5)
    table = table[np.argsort(table[:, 0], kind="stable")]  # by id here: the server's sort spills to disk
    pk_order = np.argsort(np.asarray(node_ids, dtype=np.int64))
    sorted_nodes = np.asarray(node_ids, dtype=np.int64)[pk_order]
    return _Gpus(
        pk=table[:, 0],
        node=pk_order[np.searchsorted(sorted_nodes, table[:, 1])],
        index=table[:, 2],
        usable=(table[:, 3] == 1) & (table[:, 4] == 0),
    )


def _owed(tenant_ix: dict[int, int], type_ix: dict[int, int]) -> np.ndarray:
    """The fair-share history (FairShareUsage) as [tenant, type] GPU-hours; frozen into the book, so a round
    resumed elsewhere clears with the history it was frozen with, whatever a later round wrote since."""
    owed = np.zeros((len(tenant_ix), len(type_ix)), dtype=np.float64)
    for tenant_id, type_id, hours in FairShareUsage.objects.values_list(
        "tenant_id", "gpu_type_id", "owed_gpu_hours"
    ):
        if tenant_id in tenant_ix and type_id in type_ix:
            owed[tenant_ix[tenant_id], type_ix[type_id]] = hours
    return owed


def _leases(
    rows: list[tuple[Any, ...]],
    lease_gpus: dict[int, list[tuple[int, int]]],
    tenant_ix: dict[int, int],
    type_ix: dict[int, int],
    now: int,
    expect_end: list[int],
) -> Leases:
    if not rows:
        return Leases.empty()
    slots = [lease_gpus[row[0]] for row in rows]
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(s) for s in slots])
    flat = [slot for s in slots for slot in s]
    return Leases(
        lease=np.array([row[0] for row in rows], dtype=np.int64),
        tenant=np.array([tenant_ix[row[1]] for row in rows], dtype=np.int32),
        gpu_type=np.array([type_ix[row[2]] for row in rows], dtype=np.int32),
        tier=np.array([_TIER_INDEX[row[3]] for row in rows], dtype=np.int8),
        start=np.array([int(row[4].timestamp()) for row in rows], dtype=np.int64),
        preemptible=np.array([row[5] for row in rows], dtype=np.bool_),
        # From when a preemption throws its work away (allocator.lost.lost_since, the figure the commit records):
        # the later of its job's start running and the last checkpoint its agent reported; now while not running.
        checkpoint=np.array(
            [lost_since(book_seconds(row[8]), book_seconds(row[6]), now) for row in rows], dtype=np.int64
        ),
        slot_ptr=ptr,
        slot_node=np.array([s[0] for s in flat], dtype=np.int32),
        slot_idx=np.array([s[1] for s in flat], dtype=np.int32),
        expect_end=np.array(expect_end, dtype=np.int64),
        backfill=np.array([row[7] for row in rows], dtype=np.bool_),
    )


def _bids(
    round_id: int,
    tenant_ix: dict[int, int],
    type_names: dict[str, int],
    n_types: int,
    history: RuntimeHistory,
    empty: bool,
) -> tuple[Bids, dict[int, int]]:
    """Pending jobs of active tenants; a job whose types all vanished is left out (it cannot win). Each with
    the rounds it has waited before this one (market.selectors.waiting)."""
    cols = _pending(list(tenant_ix), list(type_names))
    keep = cols["limit"].max(axis=1, initial=NO_PRICE) >= 0
    cols = {name: values[keep] for name, values in cols.items()}
    jobs = cols["job"].tolist()
    # Tenant ids to the book's tenant indices: every pending job read belongs to a tenant in tenant_ix.
    ids = np.fromiter(tenant_ix, dtype=np.int64, count=len(tenant_ix))
    order = np.argsort(ids)
    tenant = np.fromiter(tenant_ix.values(), dtype=np.int64, count=len(tenant_ix))[order][
        np.searchsorted(ids[order], cols["tenant"])
    ]
    # A tenant that sizes holds by prediction bids with its predicted p90 as the hold's duration (the
    # allocator's max_s is only ever used for the hold); the commit copies it to the lease.
    max_s = cols["max_s"]
    sized = sized_hold_seconds(job_ids=jobs)
    if sized:
        max_s = np.array([sized.get(job, seconds) for job, seconds in zip(jobs, max_s.tolist(), strict=True)])
    waited = rounds_waited_before(
        round_id=round_id, waited_before=cols["waited_before"], wait_round=cols["wait_round"]
    )
    bids = Bids(
        job=cols["job"],
        tenant=tenant.astype(np.int32),
        gpus=cols["gpus"],
        limit=cols["limit"].reshape(len(jobs), n_types),
        max_s=max_s,
        submit=cols["submit"],
        waited=waited,
        expect_s=max_s if empty else _expect_s(jobs, max_s, history),
    )
    return bids, dict(zip(jobs, cols["version"].tolist(), strict=True))


def _expect_s(jobs: list[int], max_s: np.ndarray, history: RuntimeHistory) -> np.ndarray:
    """Each pending job's predicted runtime (its remaining median given the work its earlier leases did), at
    most its max_s in the book; max_s without a prediction. Backfill on reserved nodes reads it (step 5)."""
    if not jobs:
        return np.zeros(0, dtype=np.int64)
    rows = dict(
        (pk, rest)
        for pk, *rest in Job.objects.filter(pk__in=bulk.any_of(jobs)).values_list(
            "pk", "tenant__slug", "name", "command", "gpus"
        )
    )
    done = done_seconds(job_ids=jobs)
    got = expected_runtimes(
        jobs=[
            (*rows[job], done.get(job, 0.0), seconds)
            for job, seconds in zip(jobs, max_s.tolist(), strict=True)
        ],
        history=history,
    )
    return np.array(got, dtype=np.int64)


_COLUMNS = ("job", "tenant", "gpus", "max_s", "submit", "waited_before", "wait_round", "version")


def _pending(tenant_ids: list[int], type_names: list[str]) -> dict[str, np.ndarray]:
    """The tenants' pending jobs in id order, as columns (_COLUMNS) plus `limit`: one row per job, one
    column per type in `type_names` order, micro-credits per GPU-hour or NO_PRICE where the bid leaves the
    type out (or names a type not in the list).

    On PostgreSQL each column comes as one comma-joined text built by the server, the limits extracted from
    the jobs' JSON there too: 20,000 rows become nine strings parsed by numpy, with no Python loop per job,
    which was most of the freeze (docs/rounds.md §Measured). Elsewhere (SQLite) through the ORM.
    """
    if connection.vendor == "postgresql":
        fields = ["id", "tenant_id", "gpus", "max_seconds", "floor(extract(epoch FROM submitted_at))::bigint"]
        fields += ["waited_before", "wait_round", "bid_version"]
        # The limit a job bids for one type: the matching entry of its `limits` array, else NO_PRICE.
        fields += [
            "coalesce((SELECT (e->>'limit')::bigint FROM jsonb_array_elements(limits) e "
            f"WHERE e->>'gpu_type' = %s), {NO_PRICE})"
        ] * len(type_names)
        # No ORDER BY: the aggregates of one query take the rows in one and the same order, so the columns
        # line up, and one numpy sort below costs less than the server sorting every column apart.
        aggregates = ", ".join(f"coalesce(string_agg(({f})::text, ','), '')" for f in fields)
        sql = f"SELECT {aggregates} FROM {Job._meta.db_table} WHERE state = %s AND tenant_id = ANY(%s)"
        with connection.cursor() as cursor:
            cursor.execute(sql, [*type_names, JobState.PENDING, tenant_ids])
            texts = cursor.fetchone()
        arrays = [np.array(t.split(",") if t else [], dtype=np.int64) for t in texts]
        by_id = np.argsort(arrays[0], kind="stable")
        arrays = [a[by_id] for a in arrays]
        n = len(arrays[0])
        cols = dict(zip(_COLUMNS, arrays[: len(_COLUMNS)], strict=True))
        limits = arrays[len(_COLUMNS) :]
        cols["limit"] = np.stack(limits, axis=1) if limits else np.zeros((n, 0), dtype=np.int64)
        return cols
    rows = (
        Job.objects.filter(state=JobState.PENDING, tenant_id__in=tenant_ids)
        .order_by("pk")
        .values_list(
            "pk",
            "tenant_id",
            "gpus",
            "max_seconds",
            "submitted_at",
            "waited_before",
            "wait_round",
            "bid_version",
            "limits",
        )
    )
    type_ix = {name: i for i, name in enumerate(type_names)}
    table: list[list[int]] = []
    limit_rows: list[list[int]] = []
    for row in rows.iterator(chunk_size=5000):
        table.append([*row[:4], int(row[4].timestamp()), *row[5:8]])
        limit = [NO_PRICE] * len(type_names)
        for entry in row[8]:
            if entry["gpu_type"] in type_ix:
                limit[type_ix[entry["gpu_type"]]] = int(entry["limit"])
        limit_rows.append(limit)
    matrix = np.array(table, dtype=np.int64).reshape(len(table), len(_COLUMNS))
    cols = {name: matrix[:, i] for i, name in enumerate(_COLUMNS)}
    cols["limit"] = np.array(limit_rows, dtype=np.int64).reshape(len(table), len(type_names))
    return cols
