"""The packed form of a report's GPU samples (docs/agent.md §Usage storage): one `bytea` per stored row, the
ticks x GPUs matrices as fixed-width little-endian planes, deflated. Pure functions over numpy arrays: the
ingestion (nodeagent.services.usage) packs, the readers and the downsampling unpack.

Layout (before deflate), version 1, for T ticks, G GPUs (columns) and L distinct leases:

    header  <B H B B   version, T, G, L
    t_ms    <u4[T]      each tick's offset from the row's `at` (its first tick), milliseconds
    leases  <i8[L]      the lease ids the `lease` plane points into (1-based; 0: no lease)
    util    u1[G,T]     SM utilisation %, whole
    mem     <u4[G]      memory used at the first tick, whole MB, then
            <i8[G,T-1]  its change from tick to tick (mostly 0: a job's memory stays put)
    power   <u2[G,T]    power, tenths of a watt (0 to 6,553.5 W)
    energy  <i8[G]      each GPU's energy counter at the first tick, whole joules, then
            <i8[G,T-1]  its rise from tick to tick, whole joules (negative where the counter was reset)
    lease   u1[G,T]     index into `leases`
    foreign u1[G,T]     processes on the GPU that no lease of the node covers

GPU-major planes put one GPU's consecutive ticks side by side, which is what deflate finds repeated (a job's
memory and lease stay put from tick to tick); the planes of wider numbers are stored byte by byte (every
value's lowest byte, then every value's next: a "shuffle"), so the high bytes, nearly constant, become runs
(steps are 8 bytes wide, so no counter can wrap: their high bytes cost next to nothing once deflated).
Whole joules cost at most half a joule a tick on a chart; billing reads the agent's own counters
(LeaseUsage). The 1-minute rows (`pack_minutes`) use the same idea.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

VERSION = 1
MINUTES_VERSION = 1
_HEAD = struct.Struct("<BHBB")
_LEVEL = 1  # deflate's fastest level: the ingest runs it once per report; level 6 saved a few % more

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def _deflate(raw: bytes) -> bytes:
    c = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)  # raw deflate: no zlib header or checksum to store
    return c.compress(raw) + c.flush()


def _inflate(data: bytes) -> bytes:
    return zlib.decompress(data, -15)


def _shuffle(values: npt.NDArray[Any], dtype: str) -> bytes:
    """Byte k of every value, for k from the lowest: numbers of one plane share their high bytes."""
    arr = np.ascontiguousarray(values, dtype=dtype).ravel()
    return arr.view(np.uint8).reshape(-1, arr.itemsize).T.tobytes()


def _first_and_steps(values: F64, dtype: str) -> tuple[bytes, bytes]:
    """GPUs x ticks as each GPU's first value and its steps from tick to tick (whole numbers)."""
    return _shuffle(values[:, 0], dtype), _shuffle(np.diff(values, axis=1), "<i8")


class _Reader:
    def __init__(self, raw: bytes, at: int) -> None:
        self.raw, self.at = raw, at

    def take(self, dtype: str, count: int) -> npt.NDArray[Any]:
        arr = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.at)
        self.at += arr.nbytes
        return arr

    def shuffled(self, dtype: str, count: int) -> npt.NDArray[Any]:
        size = np.dtype(dtype).itemsize
        planes = np.frombuffer(self.raw, dtype=np.uint8, count=count * size, offset=self.at)
        self.at += count * size
        return planes.reshape(size, count).T.copy().view(dtype).ravel()

    def first_and_steps(self, dtype: str, gpus: int, ticks: int) -> F64:
        """The inverse of _first_and_steps, as ticks x GPUs."""
        first = self.shuffled(dtype, gpus).astype(np.float64)
        steps = self.shuffled("<i8", gpus * (ticks - 1)).reshape(gpus, ticks - 1).astype(np.float64)
        return np.concatenate((first[:, None], first[:, None] + np.cumsum(steps, axis=1)), axis=1).T


@dataclass(frozen=True)
class Ticks:
    """A stored row's samples, unpacked: each matrix is ticks x GPUs."""

    t_ms: npt.NDArray[np.uint32]  # offsets from the row's `at`
    util: F64
    mem_mb: F64
    power_w: F64
    energy_j: F64
    lease: I64  # the lease id at each tick (0: none)
    foreign: I64


def pack(
    *,
    t_ms: npt.NDArray[np.integer[Any]],
    util: F64,
    mem_mb: F64,
    power_w: F64,
    energy_j: F64,
    lease: I64,
    foreign: I64,
) -> bytes:
    """Matrices are ticks x GPUs, already validated (nodeagent.services.usage_parse)."""
    ticks, gpus = util.shape
    # A report has a lease or two: a set of them beats np.unique's sort at this size.
    ids = np.array(sorted({0, *lease.ravel().tolist()}), dtype=np.int64)
    index = np.searchsorted(ids, lease)
    energy = energy_j.T
    parts = [
        _HEAD.pack(VERSION, ticks, gpus, len(ids) - 1),
        t_ms.astype("<u4").tobytes(),
        ids[1:].astype("<i8").tobytes(),
        np.rint(util.T).astype(np.uint8).tobytes(),
        *_first_and_steps(np.rint(mem_mb.T), "<u4"),
        _shuffle(np.rint(power_w.T * 10), "<u2"),
        *_first_and_steps(np.rint(energy), "<i8"),
        index.T.astype(np.uint8).tobytes(),
        foreign.T.astype(np.uint8).tobytes(),
    ]
    return _deflate(b"".join(parts))


def unpack(data: bytes | memoryview) -> Ticks:
    raw = _inflate(bytes(data))
    version, ticks, gpus, leases = _HEAD.unpack_from(raw)
    if version != VERSION:
        raise ValueError(f"usage blob version {version}")
    r = _Reader(raw, _HEAD.size)
    n = ticks * gpus

    def plane(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return values.reshape(gpus, ticks).T

    t_ms = r.take("<u4", ticks).astype(np.uint32)
    ids = np.concatenate(([0], r.take("<i8", leases))).astype(np.int64)
    util = plane(r.take("u1", n)).astype(np.float64)
    mem = r.first_and_steps("<u4", gpus, ticks)
    power = plane(r.shuffled("<u2", n)).astype(np.float64) / 10
    energy = r.first_and_steps("<i8", gpus, ticks)
    lease = ids[plane(r.take("u1", n))]
    foreign = plane(r.take("u1", n)).astype(np.int64)
    return Ticks(t_ms, util, mem, power, energy, lease, foreign)


@dataclass(frozen=True)
class Minutes:
    """A 1-minute row's aggregates, unpacked: each matrix is minutes x GPUs."""

    minute: npt.NDArray[np.uint16]  # offsets from the row's `at` (its hour), minutes
    util_avg: F64
    util_max: F64
    mem_avg_mb: F64
    mem_max_mb: F64
    energy_j: F64  # energy used in the minute (the counters' rise)
    samples: npt.NDArray[np.uint16]  # how many 10-s ticks the minute had


def pack_minutes(m: Minutes) -> bytes:
    minutes, gpus = m.util_avg.shape
    parts = [
        _HEAD.pack(MINUTES_VERSION, minutes, gpus, 0),
        m.minute.astype("<u2").tobytes(),
        m.samples.astype("<u2").tobytes(),
        _shuffle(np.rint(m.util_avg.T * 10), "<u2"),
        np.rint(m.util_max.T).astype(np.uint8).tobytes(),
        _shuffle(np.rint(m.mem_avg_mb.T), "<u4"),
        _shuffle(np.rint(m.mem_max_mb.T), "<u4"),
        _shuffle(np.rint(m.energy_j.T), "<i8"),
    ]
    return _deflate(b"".join(parts))


def unpack_minutes(data: bytes | memoryview) -> Minutes:
    raw = _inflate(bytes(data))
    version, minutes, gpus, _ = _HEAD.unpack_from(raw)
    if version != MINUTES_VERSION:
        raise ValueError(f"usage minutes blob version {version}")
    r = _Reader(raw, _HEAD.size)
    n = minutes * gpus

    def plane(values: npt.NDArray[Any]) -> F64:
        return values.reshape(gpus, minutes).T.astype(np.float64)

    return Minutes(
        minute=r.take("<u2", minutes).astype(np.uint16),
        samples=r.take("<u2", minutes).astype(np.uint16),
        util_avg=plane(r.shuffled("<u2", n)) / 10,
        util_max=plane(r.take("u1", n)),
        mem_avg_mb=plane(r.shuffled("<u4", n)),
        mem_max_mb=plane(r.shuffled("<u4", n)),
        energy_j=plane(r.shuffled("<i8", n)),
    )
