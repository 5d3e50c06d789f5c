"""The order book: the frozen, columnar input of one clearing round (ARCHITECTURE.md §Clearing, "Inputs").

Every table is a frozen dataclass of numpy arrays, one row per entity, so a book of 10^6 bids is a handful of
arrays rather than 10^6 Python objects. Constructors accept anything ``numpy.asarray`` accepts and convert it to
the documented dtype; each table checks its own shapes and values in ``__post_init__`` and ``Book`` checks the
cross references, raising ``BookError(field, message)`` that names the offending field (``bids[3].gpus``).

Money is integer micro-credits (``MICRO`` = 1 credit); prices are micro-credits per GPU-hour (int64).
Indices (tenant, GPU type, node) are row positions in the corresponding table.

Compatibility: this module is a contract read by allocator/sim and the market rounds. Changes are additive
(new fields get defaults). No breaking change so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator import lost
from allocator.errors import BookError

MICRO = 1_000_000
TIER_G, TIER_B, TIER_S = 0, 1, 2
TIER_NAMES = ("G", "B", "S")
NO_PRICE = -1  # in Bids.limit: this GPU type is not acceptable; in Tenants.guardrail: no guardrail

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
F64 = NDArray[np.float64]
BOOL = NDArray[np.bool_]

__all__ = [
    "MICRO",
    "NO_PRICE",
    "TIER_B",
    "TIER_G",
    "TIER_NAMES",
    "TIER_S",
    "Book",
    "BookError",
    "Bids",
    "GpuTypes",
    "Leases",
    "Nodes",
    "Policy",
    "Tenants",
    "hold_of",
]


# Sentinels for optional columns: "not given", replaced in __post_init__ by the documented default.
_UNSET_F64: F64 = np.zeros(0)
_UNSET_I64: I64 = np.zeros(0, dtype=np.int64)
_UNSET_BOOL: BOOL = np.zeros(0, dtype=np.bool_)


def hold_of(gpus: Any, price: Any, max_s: Any) -> Any:
    """Hold in micro-credits: ceil(gpus * price * max_s / 3600), integer (ARCHITECTURE.md §Money)."""
    num = np.asarray(gpus, dtype=np.int64) * np.asarray(price, dtype=np.int64) * np.asarray(max_s, np.int64)
    return -((-num) // 3600)


def _set(obj: object, name: str, value: Any, dtype: Any, ndim: int, table: str) -> None:
    arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
    if arr.ndim != ndim:
        raise BookError(f"{table}.{name}", f"must be a {ndim}-dimensional array, got shape {arr.shape}")
    arr.setflags(write=False)
    object.__setattr__(obj, name, arr)


def _first_bad(field_name: str, bad: BOOL, message: str) -> None:
    """Raise for the first row where ``bad`` holds, naming it as ``table[i].column``."""
    if bad.ndim > 1:
        bad = np.asarray(bad.any(axis=tuple(range(1, bad.ndim))), dtype=np.bool_)
    if bad.any():
        table, _, column = field_name.partition(".")
        raise BookError(f"{table}[{int(np.argmax(bad))}].{column}", message)


def _same_rows(table: str, arrays: Mapping[str, NDArray[Any]]) -> int:
    rows = {name: int(a.shape[0]) for name, a in arrays.items()}
    n = next(iter(rows.values()))
    for name, got in rows.items():
        if got != n:
            raise BookError(f"{table}.{name}", f"has {got} rows, expected {n}")
    return n


@dataclass(frozen=True)
class GpuTypes:
    """GPU types: reserve price r, posted price p and the cap on p, per type (micro-credits per GPU-hour)."""

    names: tuple[str, ...]
    reserve: I64
    posted: I64
    max_price: I64

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        for name in ("reserve", "posted", "max_price"):
            _set(self, name, getattr(self, name), np.int64, 1, "gpu_types")
        n = _same_rows(
            "gpu_types", {"reserve": self.reserve, "posted": self.posted, "max_price": self.max_price}
        )
        if len(self.names) != n or n == 0:
            raise BookError("gpu_types", f"needs at least one type and one name per type (got {n})")
        _first_bad("gpu_types.reserve", self.reserve < 0, "must be a non-negative integer")
        _first_bad("gpu_types.posted", self.posted < self.reserve, "must be at least the reserve price")
        _first_bad("gpu_types.max_price", self.max_price < self.posted, "must be at least the posted price")

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Nodes:
    """Nodes: GPU type, topology domain, capacity, and ``free[n, s]`` True when GPU slot s of node n is free.
    ``moved_at[n]``: when a job was last moved from or to node n (epoch seconds, -1 never): consolidation leaves
    a node alone for ``Policy.move_cooldown_s`` after a move."""

    names: tuple[str, ...]
    gpu_type: I32
    domain: I32
    capacity: I32
    free: BOOL
    free_count_: I32 = field(init=False, repr=False, compare=False)  # cache of free_count
    moved_at: I64 = field(default_factory=lambda: _UNSET_I64)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        if self.moved_at is _UNSET_I64:
            object.__setattr__(self, "moved_at", np.full(len(self.names), -1, dtype=np.int64))
        _set(self, "moved_at", self.moved_at, np.int64, 1, "nodes")
        if self.moved_at.shape[0] != len(self.names):
            raise BookError(
                "nodes.moved_at", f"has {self.moved_at.shape[0]} entries for {len(self.names)} nodes"
            )
        for name in ("gpu_type", "domain", "capacity"):
            _set(self, name, getattr(self, name), np.int32, 1, "nodes")
        free = np.asarray(self.free, dtype=np.bool_)
        if free.ndim == 1 and free.size == 0:
            free = free.reshape(0, 0)
        _set(self, "free", free, np.bool_, 2, "nodes")
        n = _same_rows(
            "nodes",
            {"gpu_type": self.gpu_type, "domain": self.domain, "capacity": self.capacity, "free": self.free},
        )
        if len(self.names) != n:
            raise BookError("nodes.names", f"has {len(self.names)} names for {n} nodes")
        _first_bad("nodes.capacity", self.capacity <= 0, "must be a positive integer")
        _first_bad("nodes.domain", self.domain < 0, "must be a non-negative integer")
        slots = np.arange(self.free.shape[1])[None, :]
        _first_bad("nodes.free", self.free & (slots >= self.capacity[:, None]), "slot index beyond capacity")
        count = np.asarray(self.free.sum(axis=1, dtype=np.int32), dtype=np.int32)
        count.setflags(write=False)
        object.__setattr__(self, "free_count_", count)

    def __len__(self) -> int:
        return int(self.gpu_type.shape[0])

    @property
    def free_count(self) -> I32:
        """Free GPUs per node."""
        return self.free_count_


@dataclass(frozen=True)
class Tenants:
    """Tenants: weight w, guarantee q per type, GPUs held per (tier, type), balance and spend guardrail.

    ``held[m, tier, t]`` counts every GPU tenant m holds, including those of running leases listed in the book
    (it must be at least their sum). ``guardrail[m]`` caps what one round may hold for m (``NO_PRICE`` = none).
    ``owed[m, t]``: the fair-share history, GPU-hours of its fair-share target that tenant m did not receive in
    type t (negative: received beyond it), decayed with the policy's half-life (allocator/fairshare.py); the
    rounds keep it and freeze it into the book, default none owed.
    """

    names: tuple[str, ...]
    weight: F64
    guarantee: I32
    held: I32
    balance: I64
    guardrail: I64
    owed: F64 = field(default_factory=lambda: _UNSET_F64)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        if self.owed is _UNSET_F64:
            object.__setattr__(self, "owed", np.zeros(np.asarray(self.guarantee).shape))
        _set(self, "owed", self.owed, np.float64, 2, "tenants")
        if self.owed.shape != np.asarray(self.guarantee).shape:
            raise BookError("tenants.owed", "must have shape (tenants, types), as guarantee")
        _first_bad("tenants.owed", ~np.isfinite(self.owed), "must be a finite number")
        _set(self, "weight", self.weight, np.float64, 1, "tenants")
        _set(self, "guarantee", self.guarantee, np.int32, 2, "tenants")
        _set(self, "held", self.held, np.int32, 3, "tenants")
        _set(self, "balance", self.balance, np.int64, 1, "tenants")
        _set(self, "guardrail", self.guardrail, np.int64, 1, "tenants")
        cols: dict[str, NDArray[Any]] = {
            "weight": self.weight,
            "guarantee": self.guarantee,
            "held": self.held,
            "balance": self.balance,
        }
        n = _same_rows("tenants", {**cols, "guardrail": self.guardrail})
        if len(self.names) != n:
            raise BookError("tenants.names", f"has {len(self.names)} names for {n} tenants")
        if len(set(self.names)) != n:
            raise BookError("tenants.names", "must be unique")
        _first_bad(
            "tenants.weight", ~(self.weight > 0) | ~np.isfinite(self.weight), "must be a positive number"
        )
        _first_bad("tenants.guarantee", self.guarantee < 0, "must be a non-negative integer")
        _first_bad("tenants.held", self.held < 0, "must be a non-negative integer")
        _first_bad("tenants.balance", self.balance < 0, "must be a non-negative integer")
        _first_bad("tenants.guardrail", self.guardrail < NO_PRICE, "must be a non-negative integer or none")
        if self.held.shape[1:2] != (3,):
            raise BookError("tenants.held", "must have shape (tenants, 3 tiers, types)")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def budget(self) -> I64:
        """What a round may hold per tenant: the balance, capped by the guardrail when there is one."""
        capped = np.where(self.guardrail >= 0, np.minimum(self.balance, self.guardrail), self.balance)
        return capped.astype(np.int64)


@dataclass(frozen=True)
class Bids:
    """Pending bids, one per job: gang size k, limit price per GPU-hour per type (``NO_PRICE`` = not acceptable),
    maximum runtime in seconds, submit time (epoch seconds) and rounds already waited. ``expect_s``: the runtime
    the platform predicts (docs/predictions.md; default ``max_s``): a job starts on a node reserved for a gang
    only when it is predicted to end before the gang is due (backfill, step 5)."""

    job: I64
    tenant: I32
    gpus: I32
    limit: I64
    max_s: I64
    submit: I64
    waited: I32
    expect_s: I64 = field(default_factory=lambda: _UNSET_I64)

    def __post_init__(self) -> None:
        if self.expect_s is _UNSET_I64:
            object.__setattr__(self, "expect_s", self.max_s)
        _set(self, "expect_s", self.expect_s, np.int64, 1, "bids")
        for name, dtype in (("job", np.int64), ("tenant", np.int32), ("gpus", np.int32), ("max_s", np.int64)):
            _set(self, name, getattr(self, name), dtype, 1, "bids")
        _set(self, "submit", self.submit, np.int64, 1, "bids")
        _set(self, "waited", self.waited, np.int32, 1, "bids")
        limit = np.asarray(self.limit, dtype=np.int64)
        if limit.ndim == 1 and limit.size == 0:
            limit = limit.reshape(0, 1)
        _set(self, "limit", limit, np.int64, 2, "bids")
        cols: dict[str, NDArray[Any]] = {
            "job": self.job,
            "tenant": self.tenant,
            "gpus": self.gpus,
            "limit": self.limit,
        }
        _same_rows(
            "bids",
            {
                **cols,
                "max_s": self.max_s,
                "submit": self.submit,
                "waited": self.waited,
                "expect_s": self.expect_s,
            },
        )
        _first_bad("bids.gpus", self.gpus <= 0, "must be a positive integer")
        _first_bad("bids.expect_s", self.expect_s <= 0, "must be a positive integer")
        _first_bad("bids.max_s", self.max_s <= 0, "must be a positive integer")
        _first_bad(
            "bids.limit", self.limit < NO_PRICE, "must be a non-negative integer or -1 (not acceptable)"
        )
        _first_bad(
            "bids.limit", np.asarray((self.limit < 0).all(axis=1)), "must accept at least one GPU type"
        )
        _first_bad("bids.waited", self.waited < 0, "must be a non-negative integer")
        if self.job.size and np.unique(self.job).size != self.job.size:
            _first_bad("bids.job", _duplicated(self.job), "duplicate job id")

    def __len__(self) -> int:
        return int(self.job.shape[0])

    @classmethod
    def from_rows(
        cls, rows: Sequence[Mapping[str, Any]], type_names: Sequence[str], tenant_names: Sequence[str]
    ) -> Bids:
        """Build from dicts: ``{"job", "tenant" (name), "gpus", "limits": {type: price}, "max_s" or "max_hours",
        "submit", "waited"?}``. Convenient for tests and small books."""
        from allocator.book_json import bids_from_rows

        return bids_from_rows(rows, type_names, tenant_names)


def _duplicated(values: NDArray[Any]) -> BOOL:
    order = np.argsort(values, kind="stable")
    dup_sorted = np.zeros(values.size, dtype=np.bool_)
    dup_sorted[1:] = values[order][1:] == values[order][:-1]
    out = np.zeros(values.size, dtype=np.bool_)
    out[order] = dup_sorted
    return out


@dataclass(frozen=True)
class Leases:
    """Running leases. The GPUs of lease i are ``(slot_node[j], slot_idx[j])`` for j in
    ``slot_ptr[i]:slot_ptr[i+1]`` (CSR); a lease may span several nodes (a gang on whole nodes).
    ``checkpoint[i]``: from when the lease's job would lose its work (epoch seconds; default its start): the
    later of its job's start running and its last checkpoint (allocator.lost.lost_since; the round's ``now``
    while the job is not running yet). Preempting it throws away ``gpus * (now - max(start, checkpoint))``
    GPU-seconds (allocator.lost), and reclaim prefers the victims that lose the least. ``expect_end[i]``: when
    the lease is expected to end (epoch seconds: its predicted end, else its start plus its maximum runtime; -1
    unknown): the nodes that drain soonest by it are reserved for a blocked gang (step 5). ``backfill[i]``: it
    was started on a node reserved for a gang, predicted to end before the gang is due; if it runs past that it
    is the first victim when the gang is due."""

    lease: I64
    tenant: I32
    gpu_type: I32
    tier: I8
    start: I64
    preemptible: BOOL
    slot_ptr: I64
    slot_node: I32
    slot_idx: I32
    checkpoint: I64 = field(default_factory=lambda: _UNSET_I64)
    expect_end: I64 = field(default_factory=lambda: _UNSET_I64)
    backfill: BOOL = field(default_factory=lambda: _UNSET_BOOL)

    def __post_init__(self) -> None:
        if self.checkpoint is _UNSET_I64:
            object.__setattr__(self, "checkpoint", self.start)
        _set(self, "checkpoint", self.checkpoint, np.int64, 1, "leases")
        if self.expect_end is _UNSET_I64:
            object.__setattr__(self, "expect_end", np.full(np.asarray(self.start).shape, -1, dtype=np.int64))
        _set(self, "expect_end", self.expect_end, np.int64, 1, "leases")
        if self.backfill is _UNSET_BOOL:
            object.__setattr__(self, "backfill", np.zeros(np.asarray(self.start).shape, dtype=np.bool_))
        _set(self, "backfill", self.backfill, np.bool_, 1, "leases")
        for name, dtype in (
            ("lease", np.int64),
            ("tenant", np.int32),
            ("gpu_type", np.int32),
            ("tier", np.int8),
        ):
            _set(self, name, getattr(self, name), dtype, 1, "leases")
        _set(self, "start", self.start, np.int64, 1, "leases")
        _set(self, "preemptible", self.preemptible, np.bool_, 1, "leases")
        for name, dtype in (("slot_ptr", np.int64), ("slot_node", np.int32), ("slot_idx", np.int32)):
            _set(self, name, getattr(self, name), dtype, 1, "leases")
        cols: dict[str, NDArray[Any]] = {
            "lease": self.lease,
            "tenant": self.tenant,
            "gpu_type": self.gpu_type,
            "tier": self.tier,
        }
        n = _same_rows(
            "leases",
            {
                **cols,
                "start": self.start,
                "preemptible": self.preemptible,
                "checkpoint": self.checkpoint,
                "expect_end": self.expect_end,
                "backfill": self.backfill,
            },
        )
        _first_bad(
            "leases.expect_end", self.expect_end < -1, "must be a time (epoch seconds) or -1 (unknown)"
        )
        if self.slot_ptr.shape[0] != n + 1 or self.slot_ptr[0] != 0 or (np.diff(self.slot_ptr) <= 0).any():
            raise BookError(
                "leases.gpus", "every lease needs at least one GPU (slot_ptr must increase from 0)"
            )
        if self.slot_node.shape[0] != self.slot_ptr[-1] or self.slot_idx.shape[0] != self.slot_ptr[-1]:
            raise BookError("leases.gpus", "slot_node and slot_idx must have slot_ptr[-1] entries")
        _first_bad("leases.tier", (self.tier < TIER_G) | (self.tier > TIER_S), "must be G, B or S")
        if self.lease.size and np.unique(self.lease).size != self.lease.size:
            _first_bad("leases.lease", _duplicated(self.lease), "duplicate lease id")

    def __len__(self) -> int:
        return int(self.lease.shape[0])

    def lost_gpu_s(self, now: int) -> I64:
        """GPU-seconds of work each lease would throw away if preempted at ``now`` (allocator.lost, the figure the
        commit records): since the later of its start and its checkpoint."""
        return lost.lost_gpu_s(self.gpus, np.maximum(self.start, self.checkpoint), now)

    @property
    def gpus(self) -> I64:
        """GPUs per lease."""
        return np.diff(self.slot_ptr)

    @property
    def slot_owner(self) -> I64:
        """Lease row of every (slot_node, slot_idx) entry."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.gpus)

    @classmethod
    def empty(cls) -> Leases:
        z64, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        ptr = np.zeros(1, dtype=np.int64)
        return cls(z64, z32, z32, z32.astype(np.int8), z64, z64.astype(np.bool_), ptr, z32, z32)


@dataclass(frozen=True)
class Policy:
    """Round policy. ``price_step_bp``: multiplicative step of the posted price in basis points (step 7);
    ``starve_rounds``: rounds a gang may wait before nodes are reserved for it (step 5); ``min_runtime_s``:
    a lease younger than this is never preempted (step 6); ``max_reservations``: starving gangs served per type;
    ``max_reserved_pct``: the share of a type's nodes that may be reserved at once (at least one node);
    ``fair_reclaim``: whether a tenant below its entitlement may preempt for it (step 6);
    ``fair_share_half_life_s``: half-life of the fair-share history (``Tenants.owed``; 0: no history, every
    round starts afresh); ``fair_share_payback_s``: how fast what a tenant is owed is paid back: owed GPU-hours
    over this time add to its entitlement (step 3; allocator/fairshare.py); consolidation (step 5,
    reference/consolidate.py): ``max_moves`` leases moved per round at most (0: no moves), none younger than
    ``move_min_runtime_s``, none losing more than ``move_max_lost_gpu_s`` GPU-seconds of work since its last
    checkpoint, no node moved from or to again within ``move_cooldown_s``; a move costs ``move_restart_s`` per
    GPU (stopping, checkpointing, starting again) plus the work lost, and happens only when that costs less than
    the gang waiting for its nodes to drain."""

    min_runtime_s: int = 600
    starve_rounds: int = 5
    price_step_bp: int = 500
    max_reservations: int = 1
    max_reserved_pct: int = 10
    fair_reclaim: bool = True
    fair_share_half_life_s: int = 86400
    fair_share_payback_s: int = 3600
    max_moves: int = 4
    move_min_runtime_s: int = 1800
    move_max_lost_gpu_s: int = 7200
    move_cooldown_s: int = 3600
    move_restart_s: int = 600

    def __post_init__(self) -> None:
        for name in (f.name for f in fields(self) if f.name != "fair_reclaim"):  # every integer knob
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise BookError(f"policy.{name}", "must be a non-negative integer")
        if self.max_reserved_pct > 100:
            raise BookError("policy.max_reserved_pct", "must be at most 100")
        if not isinstance(self.fair_reclaim, bool | np.bool_):
            raise BookError("policy.fair_reclaim", "must be true or false")
        if self.fair_share_payback_s == 0:
            raise BookError("policy.fair_share_payback_s", "must be a positive integer")


@dataclass(frozen=True)
class Book:
    """One round's frozen snapshot: the whole input of ``allocator.clear``."""

    now: int
    round: int
    types: GpuTypes
    nodes: Nodes
    tenants: Tenants
    bids: Bids
    leases: Leases = field(default_factory=Leases.empty)
    policy: Policy = field(default_factory=Policy)

    def __post_init__(self) -> None:
        from allocator.book_checks import check_book

        check_book(self)

    @classmethod
    def from_json(cls, data: Any) -> Book:
        """Build from the JSON document described in docs/allocator.md (a parsed ``dict``)."""
        from allocator.book_json import book_from_json

        return book_from_json(data)

    def to_json(self) -> dict[str, Any]:
        """The JSON document for this book (bids in columnar form)."""
        from allocator.book_json import book_to_json

        return book_to_json(self)
