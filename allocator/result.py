"""The result of one clearing round: columnar, frozen, hashed (ARCHITECTURE.md §Clearing, steps 1-7).

Winners, losers and preemptions are tables of numpy arrays; the GPUs of winner i are
``(slot_node[j], slot_idx[j])`` for j in ``slot_ptr[i]:slot_ptr[i+1]``. Every bid of the book is either a winner
or a loser (exactly once). ``digest`` is a BLAKE3 hash of the canonical serialisation (``allocator.digest``):
the same book always gives the same bytes, so the same digest.

Compatibility: this module is a contract read by allocator/sim and the market rounds. Changes are additive,
with one exception: the digest's definition changed twice (to a sha256 over one sha256 per array, then to
BLAKE3 over all arrays at once, ``allocator.digest``; nothing outside the allocator read the parts), so digests
of the same result differ from those of earlier versions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_NAMES
from allocator.digest import compute_digest

# Why a bid lost (Losers.reason); docs/allocator.md lists them with the meaning of ``figure``.
BELOW_RESERVE = 1  # figure: the reserve price of its best type
OVER_BUDGET = 2  # figure: the hold it needed (at its limit price)
GUARANTEE_FULL = 3  # guarantee full and price below p, no spot GPUs left; figure: the posted price p
OUTBID = 4  # figure: the limit per GPU-hour that would have won
NO_FIT = 5  # figure: the largest gang that could still be placed in its type
# Tiers G and B took every GPU of the type, so none was left for spot, and no higher bid took this one's place
# (its tenant's guarantee is not what stops it either); figure -1: no price would have won this round.
BUSY = 6
REASON_NAMES = {
    BELOW_RESERVE: "below_reserve",
    OVER_BUDGET: "over_budget",
    GUARANTEE_FULL: "guarantee_full_below_posted",
    OUTBID: "outbid",
    NO_FIT: "no_node_fits",
    BUSY: "busy",
}
# Why a lease is preempted (Preemptions.reason).
RECLAIM = 1  # its GPUs restore another tenant's guarantee (step 6)
FAIR_SHARE = 2  # its GPUs bring another tenant up to its entitlement (step 6, fair reclaim)
BACKFILL_DUE = (
    3  # started by backfill on a node reserved for a gang, it ran past its prediction: the gang is due
)
MOVED = 4  # moved to another node to make room for a gang, placed again there in the same round (step 5)
PREEMPT_NAMES = {
    RECLAIM: "reclaim_guarantee",
    FAIR_SHARE: "fair_share",
    BACKFILL_DUE: "backfill_overran",
    MOVED: "moved",
}

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
_UNSET: NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # "not given": replaced in Result.__post_init__
I8 = NDArray[np.int8]


def _frozen_arrays(obj: object) -> None:
    """Make every array field of the dataclass ``obj`` contiguous and read-only."""
    for name in (f.name for f in fields(obj)):  # type: ignore[arg-type]  # fields() wants a dataclass; obj is one, typed object for any result
        value = getattr(obj, name)
        if isinstance(value, np.ndarray):
            value = np.ascontiguousarray(value)
            value.setflags(write=False)
            object.__setattr__(obj, name, value)


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


@dataclass(frozen=True)
class Moves:
    """Running leases moved to make room for a gang (step 5, consolidation): lease ``row`` in ``book.leases`` is
    preempted (reason ``MOVED``, in ``Result.preemptions``) and its job placed again at once on the GPUs
    ``(slot_node[j], slot_idx[j])`` for j in ``slot_ptr[i]:slot_ptr[i+1]``, same type, tier and price."""

    lease: I64
    row: I64
    slot_ptr: I64
    slot_node: I32
    slot_idx: I32

    def __post_init__(self) -> None:
        _frozen_arrays(self)

    def __len__(self) -> int:
        return int(self.lease.shape[0])

    @classmethod
    def empty(cls) -> Moves:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, np.zeros(1, dtype=np.int64), z.astype(np.int32), z.astype(np.int32))


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
    moved to tier G (step 2); ``reserved_node``/``reserved_job``/``reserved_start``: nodes held for a blocked
    gang (step 5) and when the gang is expected to start there (epoch seconds, -1 unknown); ``backfill_job``: the
    winners started by backfill on such nodes; ``moves``: running leases moved to another node to make room for
    a gang, with their new GPUs; ``counters``: named counts (e.g. ``guarantee_unrestored``)."""

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
    reserved_start: I64 = field(default_factory=lambda: _UNSET)
    backfill_job: I64 = field(default_factory=lambda: _UNSET)
    moves: Moves = field(default_factory=Moves.empty)

    def __post_init__(self) -> None:
        if self.reserved_start is _UNSET:
            object.__setattr__(self, "reserved_start", np.full(self.reserved_node.shape, -1, dtype=np.int64))
        if self.backfill_job is _UNSET:
            object.__setattr__(self, "backfill_job", np.zeros(0, dtype=np.int64))
        _frozen_arrays(self)
        object.__setattr__(self, "counters", dict(sorted(self.counters.items())))
        if not self.digest:
            object.__setattr__(self, "digest", compute_digest(self))

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
