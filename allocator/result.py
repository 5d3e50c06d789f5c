"""The result of one clearing round: columnar, frozen, hashed (ARCHITECTURE.md §Clearing, steps 1-7).

Winners, losers and preemptions are tables of numpy arrays; the GPUs of winner i are
``(slot_node[j], slot_idx[j])`` for j in ``slot_ptr[i]:slot_ptr[i+1]``. Every bid of the book is either a winner
or a loser (exactly once). ``digest`` is a sha256 over the canonical serialisation (see ``compute_digest``):
the same book always gives the same bytes, so the same digest.

Compatibility: this module is a contract read by allocator/sim and the market rounds. Changes are additive,
with one exception: the digest's definition changed (a sha256 over one sha256 per array, each array narrowed to
the smallest integer type; ``canonical_parts``/``canonical_bytes`` gave way to ``digest_units``/``unit_digest``,
which nothing outside this module read), so digests of the same result differ from those of earlier versions.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import InitVar, dataclass, fields
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_NAMES

# Why a bid lost (Losers.reason); docs/allocator.md lists them with the meaning of ``figure``.
BELOW_RESERVE = 1  # figure: the reserve price of its best type
OVER_BUDGET = 2  # figure: the hold it needed (at its limit price)
GUARANTEE_FULL = 3  # guarantee full and price below p, no spot GPUs left; figure: the posted price p
OUTBID = 4  # figure: the limit per GPU-hour that would have won
NO_FIT = 5  # figure: the largest gang that could still be placed in its type
REASON_NAMES = {
    BELOW_RESERVE: "below_reserve",
    OVER_BUDGET: "over_budget",
    GUARANTEE_FULL: "guarantee_full_below_posted",
    OUTBID: "outbid",
    NO_FIT: "no_node_fits",
}
# Why a lease is preempted (Preemptions.reason).
RECLAIM = 1  # its GPUs restore another tenant's guarantee (step 6)
PREEMPT_NAMES = {RECLAIM: "reclaim_guarantee"}

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
I8 = NDArray[np.int8]
T = TypeVar("T")


def _frozen_arrays(obj: object) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray):
            value = np.ascontiguousarray(value)
            value.setflags(write=False)
            object.__setattr__(obj, f.name, value)


@dataclass(frozen=True)
class Winners:
    """Winning bids: ``bid`` is the row in ``book.bids``; price and hold are micro-credits."""

    job: I64
    bid: I64
    tenant: I32
    tier: I8
    gpu_type: I32
    price: I64
    hold: I64
    slot_ptr: I64
    slot_node: I32
    slot_idx: I32

    def __post_init__(self) -> None:
        _frozen_arrays(self)

    def __len__(self) -> int:
        return int(self.job.shape[0])


@dataclass(frozen=True)
class Losers:
    """Bids that did not win, with the reason code and the figure behind it (see REASON_NAMES)."""

    job: I64
    bid: I64
    reason: I8
    gpu_type: I32
    figure: I64

    def __post_init__(self) -> None:
        _frozen_arrays(self)

    def __len__(self) -> int:
        return int(self.job.shape[0])


@dataclass(frozen=True)
class Preemptions:
    """Leases to preempt (``row`` in ``book.leases``), why, and the job whose guarantee they restore."""

    lease: I64
    row: I64
    reason: I8
    for_job: I64

    def __post_init__(self) -> None:
        _frozen_arrays(self)

    def __len__(self) -> int:
        return int(self.lease.shape[0])


class WinnerRecord(NamedTuple):
    """One winner as a small record, for consumers with few winners."""

    job: int
    tenant: str
    tier: str
    gpu_type: str
    price: int
    hold: int
    gpus: tuple[tuple[str, int], ...]  # (node name, slot)


@dataclass(frozen=True)
class Result:
    """Everything one round decides. ``posted``: the posted price per type for the next round;
    ``spot_price``: the uniform tier-S price per type this round (-1: no spot winner); ``retiered``: lease ids
    moved to tier G (step 2); ``reserved_node``/``reserved_job``: nodes held free for a starving gang (step 5);
    ``counters``: named counts (e.g. ``guarantee_unrestored``)."""

    round: int
    winners: Winners
    losers: Losers
    preemptions: Preemptions
    retiered: I64
    posted: I64
    spot_price: I64
    reserved_node: I32
    reserved_job: I64
    counters: Mapping[str, int]
    type_names: tuple[str, ...]
    node_names: tuple[str, ...]
    tenant_names: tuple[str, ...]
    digest: str = ""
    known: InitVar[Mapping[str, bytes] | None] = None  # unit digests already computed (``result_build``)

    def __post_init__(self, known: Mapping[str, bytes] | None) -> None:
        _frozen_arrays(self)
        object.__setattr__(self, "counters", dict(sorted(self.counters.items())))
        if not self.digest:
            object.__setattr__(self, "digest", compute_digest(self, known))

    def winner_records(self) -> Iterator[WinnerRecord]:
        """Iterate winners as small records (fine for a few thousand; use the arrays beyond)."""
        w = self.winners
        for i in range(len(w)):
            lo, hi = int(w.slot_ptr[i]), int(w.slot_ptr[i + 1])
            gpus = tuple((self.node_names[w.slot_node[j]], int(w.slot_idx[j])) for j in range(lo, hi))
            yield WinnerRecord(
                int(w.job[i]),
                self.tenant_names[w.tenant[i]],
                TIER_NAMES[w.tier[i]],
                self.type_names[w.gpu_type[i]],
                int(w.price[i]),
                int(w.hold[i]),
                gpus,
            )

    def to_json(self) -> dict[str, Any]:
        """The JSON document of this result (docs/allocator.md)."""
        from allocator.result_json import result_to_json

        return result_to_json(self)


_DIGEST_FIELDS = {
    "winners": ("job", "tier", "gpu_type", "price", "hold", "gpus", "slot_node", "slot_idx"),
    "losers": ("job", "reason", "gpu_type", "figure"),
    "preemptions": ("lease", "reason", "for_job"),
    "": ("retiered", "posted", "spot_price", "reserved_node", "reserved_job"),
}
_WIDTHS = tuple((np.dtype(f"<i{n}"), -(1 << (8 * n - 1)), (1 << (8 * n - 1)) - 1) for n in (1, 2, 4))


def narrowest(arr: NDArray[Any]) -> NDArray[Any]:
    """``arr`` as the narrowest little-endian signed integer type that holds all its values (int8 when empty),
    so that the bytes depend on the values only, not on the dtype the result happens to use."""
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=_WIDTHS[0][0])
    lo, hi = int(arr.min()), int(arr.max())
    for dt, least, most in _WIDTHS:
        if least <= lo and hi <= most:
            return np.ascontiguousarray(arr, dtype=dt)
    return np.ascontiguousarray(arr, dtype=np.dtype("<i8"))


def digest_units(result: Result) -> list[tuple[str, NDArray[Any]]]:
    """The arrays hashed into ``digest``, named ``table.field``, in their fixed order (rows in result order;
    bid rows and tenant indices are left out, they follow from job ids and the book; ``winners.gpus`` is the
    GPU count of each winner, the differences of ``slot_ptr``)."""
    return [
        u for table in _DIGEST_FIELDS for u in table_units(table, getattr(result, table) if table else result)
    ]


def table_units(table: str, obj: Any) -> list[tuple[str, NDArray[Any]]]:
    """``digest_units`` of one table (``obj``: the Winners, Losers or Preemptions; the Result for "")."""
    out = []
    for name in _DIGEST_FIELDS[table]:
        arr = np.diff(obj.slot_ptr) if table == "winners" and name == "gpus" else getattr(obj, name)
        out.append((f"{table}.{name}", arr))
    return out


def unit_digest(name: str, arr: NDArray[Any]) -> bytes:
    """sha256 of one array: ``name|dtype|shape|`` then its values in the narrowest little-endian signed
    integer type that holds them (``narrowest``)."""
    le = narrowest(arr)
    h = hashlib.sha256(f"{name}|{le.dtype.str}|{arr.shape}|".encode())
    h.update(le.view(np.uint8).data if le.size else b"")
    return h.digest()


def trailer(result: Result) -> bytes:
    """The rest of the canonical serialisation: the round, the counters (sorted) and the name tables."""
    parts = [f"round={result.round}", "\x1e".join(f"{k}={v}" for k, v in result.counters.items())]
    return "\x1d".join(parts).encode() + b"\x1d" + _names_bytes(result)


_names_cache: list[tuple[tuple[tuple[str, ...], ...], bytes]] = []


def _names_bytes(result: Result) -> bytes:
    """The name tables of ``trailer``, encoded. A round's tables are the book's tuples, the same objects every
    round of a book (and a market keeps them while its cluster does not change), and encoding thousands of
    names cost more than the rest of the trailer: the last few are kept, by identity."""
    tables = (result.type_names, result.node_names, result.tenant_names)
    for key, value in _names_cache:
        if all(a is b for a, b in zip(key, tables, strict=True)):
            return value
    value = "\x1d".join("\x00".join(names) for names in tables).encode()
    _names_cache[:] = [(tables, value), *_names_cache[:3]]
    return value


class Background(Generic[T]):
    """``fn(*args)`` on a second thread while the caller goes on; ``get`` waits and returns its value (or raises
    its exception). Numpy and hashlib release the GIL on large arrays, so the two threads use two cores."""

    def __init__(self, fn: Callable[..., T], *args: Any) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn, args), name="allocator", daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...]) -> None:
        try:
            self.value = fn(*args)
        except BaseException as exc:  # re-raised by get, in the caller's thread
            self.error = exc

    def get(self) -> T:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def unit_digests(units: list[tuple[str, NDArray[Any]]]) -> dict[str, bytes]:
    """``unit_digest`` of each unit, by name."""
    return {name: unit_digest(name, arr) for name, arr in units}


def compute_digest(result: Result, known: Mapping[str, bytes] | None = None) -> str:
    """The canonical digest: sha256 over the unit digests (``unit_digest`` of every array of
    ``digest_units``, in order) followed by the sha256 of ``trailer``. ``known``: unit digests already
    computed (``result_build`` hashes the losers while it builds the winners); the rest are hashed on two
    threads where there is enough to hash."""
    units = digest_units(result)
    done = dict(known or {})
    todo = [u for u in units if u[0] not in done]
    side = None
    if sum(a.nbytes for _, a in todo) > 1 << 21:  # split by size: the larger units alternate between threads
        todo.sort(key=lambda u: -u[1].nbytes)
        side = Background(unit_digests, todo[1::2])
        todo = todo[0::2]
    done.update(unit_digests(todo))
    if side is not None:
        done.update(side.get())
    h = hashlib.sha256()
    for name, _ in units:
        h.update(done[name])
    h.update(hashlib.sha256(trailer(result)).digest())
    return h.hexdigest()
