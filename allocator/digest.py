"""The digest of a Result: BLAKE3 over its canonical serialisation (docs/allocator.md, "Result").

Canonical serialisation, in this order:

1. a head, ``name|width|length`` for every array of ``digest_units`` joined by 0x1e, then 0x1d;
2. the body: each array's values as little-endian signed integers of ``width`` bytes, the narrowest of 1, 2,
   4, 8 that holds all of them (1 when empty), zero-padded to a multiple of 8 bytes;
3. the trailer: the round, the counters (sorted) and the name tables.

Narrowing makes the bytes depend on the values only, not on the dtype a result happens to use (a result read
back from JSON hashes as the one written).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import blake3
import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from allocator.result import Result

DIGEST_FIELDS = {
    "winners": ("job", "tier", "gpu_type", "price", "hold", "gpus", "slot_node", "slot_idx"),
    "losers": ("job", "reason", "gpu_type", "figure"),
    "preemptions": ("lease", "reason", "for_job"),
    "moves": ("lease", "slot_ptr", "slot_node", "slot_idx"),
    "": (
        "retiered",
        "posted",
        "spot_price",
        "reserved_node",
        "reserved_job",
        "reserved_start",
        "backfill_job",
    ),
}


def digest_units(result: Result) -> list[tuple[str, NDArray[Any]]]:
    """The arrays of the body, named ``table.field``, in their fixed order (rows in result order; bid rows and
    tenant indices are left out, they follow from job ids and the book; ``winners.gpus`` is the GPU count of
    each winner, the differences of ``slot_ptr``)."""
    out = []
    for table, names in DIGEST_FIELDS.items():
        obj: Any = getattr(result, table) if table else result
        for name in names:
            arr = np.diff(obj.slot_ptr) if table == "winners" and name == "gpus" else getattr(obj, name)
            out.append((f"{table}.{name}", arr))
    return out


def narrow(arr: NDArray[Any]) -> tuple[int, NDArray[Any]]:
    """The 1-D integer array ``arr`` as little-endian signed integers of the narrowest width that holds its
    values; returns (width, the narrowed array). The body pads each to a multiple of 8 bytes."""
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    width = next(w for w in (1, 2, 4, 8) if lo >= -(1 << (8 * w - 1)) and hi < 1 << (8 * w - 1))
    return width, np.ascontiguousarray(arr, dtype=f"<i{width}")


def canonical_parts(units: list[tuple[str, NDArray[Any]]]) -> tuple[bytes, list[NDArray[Any]]]:
    """The head of the canonical serialisation of ``units`` and the narrowed arrays of its body."""
    heads, body = [], []
    for name, arr in units:
        width, data = narrow(arr)
        heads.append(f"{name}|{width}|{arr.size}")
        body.append(data)
    return "\x1e".join(heads).encode() + b"\x1d", body


def trailer(result: Result) -> bytes:
    """The last part of the canonical serialisation: the round, the counters (sorted) and the name tables."""
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


def compute_digest(result: Result) -> str:
    """The canonical digest: BLAKE3 (256 bits, hex) of head, body and trailer (module docstring)."""
    head, body = canonical_parts(digest_units(result))
    h = blake3.blake3(head)
    for data in body:
        h.update(data.view(np.uint8).data)
        h.update(bytes(-data.nbytes % 8))
    h.update(trailer(result))
    return h.hexdigest()
