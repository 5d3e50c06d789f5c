"""The packed form of a report's GPU samples (docs/agent.md §Usage storage): one `bytea` per stored row, the
ticks x GPUs matrices as fixed-width little-endian planes, deflated. Pure functions over numpy arrays: the
ingestion (nodeagent.services.usage) packs, the readers and the downsampling unpack.

Layout (before deflate), version 1, for T ticks, G GPUs (columns) and L distinct leases:

    header  <B H B B   version, T, G, L
    t_ms    <u4[T]      each tick's offset from the row's `at` (its first tick), milliseconds
    leases  <i8[L]      the lease ids the `lease` plane points into (1-based; 0: no lease)
    util    u1[G,T]     SM utilisation %, whole
    mem     <u4[G,T]    memory used, whole MB
    power   <u2[G,T]    power, tenths of a watt (0 to 6,553.5 W)
    energy  <f8[G]      each GPU's energy counter at the first tick (J), then
            <f4[G,T-1]  its rise from tick to tick (negative where the counter was reset)
    lease   u1[G,T]     index into `leases`
    foreign u1[G,T]     processes on the GPU that no lease of the node covers

GPU-major planes put one GPU's consecutive ticks side by side, which is what deflate finds repeated (a job's
memory and lease stay put from tick to tick). The 1-minute rows (`pack_minutes`) use the same idea.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

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
    t_ms: npt.NDArray[np.integer],
    util: F64,
    mem_mb: F64,
    power_w: F64,
    energy_j: F64,
    lease: I64,
    foreign: I64,
) -> bytes:
    """Matrices are ticks x GPUs, already validated (nodeagent.services.usage_parse)."""
    ticks, gpus = util.shape
    ids, index = np.unique(lease, return_inverse=True)
    if ids[0] != 0:  # index 0 is kept for "no lease"
        ids, index = np.concatenate(([0], ids)), index + 1
    energy = energy_j.T
    parts = [
        _HEAD.pack(VERSION, ticks, gpus, len(ids) - 1),
        t_ms.astype("<u4").tobytes(),
        ids[1:].astype("<i8").tobytes(),
        np.rint(util.T).astype(np.uint8).tobytes(),
        np.rint(mem_mb.T).astype("<u4").tobytes(),
        np.rint(power_w.T * 10).astype("<u2").tobytes(),
        energy[:, 0].astype("<f8").tobytes(),
        np.diff(energy, axis=1).astype("<f4").tobytes(),
        index.reshape(ticks, gpus).T.astype(np.uint8).tobytes(),
        foreign.T.astype(np.uint8).tobytes(),
    ]
    return _deflate(b"".join(parts))


def unpack(data: bytes) -> Ticks:
    raw = _inflate(bytes(data))
    version, ticks, gpus, leases = _HEAD.unpack_from(raw)
    if version != VERSION:
        raise ValueError(f"usage blob version {version}")
    at = _HEAD.size
    n = ticks * gpus

    def take(dtype: str, count: int) -> npt.NDArray[np.generic]:
        nonlocal at
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=at)
        at += arr.nbytes
        return arr

    t_ms = take("<u4", ticks).astype(np.uint32)
    ids = np.concatenate(([0], take("<i8", leases))).astype(np.int64)
    util = take("u1", n).reshape(gpus, ticks).T.astype(np.float64)
    mem = take("<u4", n).reshape(gpus, ticks).T.astype(np.float64)
    power = take("<u2", n).reshape(gpus, ticks).T.astype(np.float64) / 10
    first = take("<f8", gpus).astype(np.float64)
    rises = take("<f4", gpus * (ticks - 1)).reshape(gpus, ticks - 1).astype(np.float64)
    energy = np.concatenate((first[:, None], first[:, None] + np.cumsum(rises, axis=1)), axis=1).T
    lease = ids[take("u1", n).reshape(gpus, ticks).T]
    foreign = take("u1", n).reshape(gpus, ticks).T.astype(np.int64)
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
        np.rint(m.util_avg.T * 10).astype("<u2").tobytes(),
        np.rint(m.util_max.T).astype(np.uint8).tobytes(),
        np.rint(m.mem_avg_mb.T).astype("<u4").tobytes(),
        np.rint(m.mem_max_mb.T).astype("<u4").tobytes(),
        m.energy_j.T.astype("<f4").tobytes(),
    ]
    return _deflate(b"".join(parts))


def unpack_minutes(data: bytes) -> Minutes:
    raw = _inflate(bytes(data))
    version, minutes, gpus, _ = _HEAD.unpack_from(raw)
    if version != MINUTES_VERSION:
        raise ValueError(f"usage minutes blob version {version}")
    at = _HEAD.size
    n = minutes * gpus

    def take(dtype: str, count: int, shape: tuple[int, ...] = ()) -> npt.NDArray[np.generic]:
        nonlocal at
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=at)
        at += arr.nbytes
        return arr.reshape(shape).T if shape else arr

    return Minutes(
        minute=take("<u2", minutes).astype(np.uint16),
        samples=take("<u2", minutes).astype(np.uint16),
        util_avg=take("<u2", n, (gpus, minutes)).astype(np.float64) / 10,
        util_max=take("u1", n, (gpus, minutes)).astype(np.float64),
        mem_avg_mb=take("<u4", n, (gpus, minutes)).astype(np.float64),
        mem_max_mb=take("<u4", n, (gpus, minutes)).astype(np.float64),
        energy_j=take("<f4", n, (gpus, minutes)).astype(np.float64),
    )
