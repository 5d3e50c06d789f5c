"""Usage reports as the agent sends them (docs/agent.md §Protocol, `POST usage`), checked field by field.

Hand-written rather than a DRF serializer: the ingest path takes thousands of GPU samples a second
(bench/usage.py) and a nested serializer costs more per report than the whole database write. The API's
request serializer (nodeagent/api/serializers.py) documents the same shape in the OpenAPI schema. Every
refusal names the field (`gpus[3].util_pct`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from nodeagent.errors import NodeError

LOG_TAIL_MAX = 64 * 1024
MAX_GPUS = 64
MAX_LEASES = 256
MAX_PROCESSES = 1024
INT_MAX = 2**62


@dataclass(frozen=True)
class LeaseCounters:
    """One lease's cumulative counters on one node, from the job's start."""

    lease: int
    gpu_seconds: float
    energy_j: float
    util_avg: float
    util_max: float
    mem_avg_mb: float
    mem_max_mb: float
    samples: int
    log_tail: str


@dataclass(frozen=True)
class Report:
    boot_epoch: int
    seq: int
    sent_at: datetime
    gpus: list[dict[str, Any]]
    leases: list[LeaseCounters]

    def lease_util(self) -> dict[int, float]:
        """Each lease's utilisation now: the busiest GPU it has a process on (0 when it has none)."""
        util: dict[int, float] = {c.lease: 0.0 for c in self.leases}
        for gpu in self.gpus:
            for proc in gpu["processes"]:
                lease = proc["lease"]
                if lease in util:
                    util[lease] = max(util[lease], gpu["util_pct"])
        return util


def _obj(data: Any, path: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise NodeError("must be an object", field=path or "body")
    return data


def _int(data: dict[str, Any], key: str, path: str, low: int = 0, high: int = INT_MAX) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise NodeError("must be a whole number", field=path + key)
    if not low <= value <= high:
        raise NodeError(f"must be between {low} and {high}", field=path + key)
    return value


def _num(data: dict[str, Any], key: str, path: str, high: float = 1e15) -> float:
    value = data.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise NodeError("must be a number", field=path + key)
    if not (math.isfinite(value) and 0 <= value <= high):
        raise NodeError(f"must be between 0 and {high:g}", field=path + key)
    return float(value)


def _when(data: dict[str, Any], key: str, path: str) -> datetime:
    value = data.get(key)
    parsed = parse_datetime(value) if isinstance(value, str) and len(value) <= 40 else None
    if parsed is None or parsed.tzinfo is None:
        raise NodeError("must be an ISO 8601 time with a zone", field=path + key)
    return parsed


def _list(data: dict[str, Any], key: str, path: str, most: int) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise NodeError("must be a list", field=path + key)
    if len(value) > most:
        raise NodeError(f"has {len(value)} entries; at most {most}", field=path + key)
    return value


def _gpu(data: Any, path: str) -> dict[str, Any]:
    gpu = _obj(data, path)
    uuid = gpu.get("uuid")
    if not isinstance(uuid, str) or not 0 < len(uuid) <= 96:
        raise NodeError("must be a GPU UUID (1 to 96 characters)", field=path + ".uuid")
    healthy = gpu.get("healthy", True)
    if not isinstance(healthy, bool):
        raise NodeError("must be true or false", field=path + ".healthy")
    processes = []
    for j, raw in enumerate(_list(gpu, "processes", path + ".", MAX_PROCESSES)):
        where = f"{path}.processes[{j}]"
        proc = _obj(raw, where)
        lease = proc.get("lease")
        if lease is not None and (not isinstance(lease, int) or isinstance(lease, bool)):
            raise NodeError("must be a lease id or null", field=where + ".lease")
        processes.append(
            {
                "pid": _int(proc, "pid", where + "."),
                "used_mb": _num(proc, "used_mb", where + "."),
                "lease": lease,
            }
        )
    p = path + "."
    return {
        "uuid": uuid,
        "at": _when(gpu, "at", p).isoformat(),
        "healthy": healthy,
        "util_pct": _num(gpu, "util_pct", p, 100),
        "mem_used_mb": _num(gpu, "mem_used_mb", p),
        "power_w": _num(gpu, "power_w", p),
        "energy_j": _num(gpu, "energy_j", p),
        "processes": processes,
    }


def _counters(data: Any, path: str) -> LeaseCounters:
    c = _obj(data, path)
    p = path + "."
    tail = c.get("log_tail", "")
    if not isinstance(tail, str):
        raise NodeError("must be text", field=p + "log_tail")
    return LeaseCounters(
        lease=_int(c, "lease", p, 1),
        gpu_seconds=_num(c, "gpu_seconds", p),
        energy_j=_num(c, "energy_j", p),
        util_avg=_num(c, "util_avg", p, 100),
        util_max=_num(c, "util_max", p, 100),
        mem_avg_mb=_num(c, "mem_avg_mb", p),
        mem_max_mb=_num(c, "mem_max_mb", p),
        samples=_int(c, "samples", p),
        # The newest 64 KiB is what the owner wants to read; an agent sending more is cut, not refused.
        log_tail=tail[-LOG_TAIL_MAX:].replace("\x00", ""),
    )


def parse_counters(data: Any, *, lease: int, path: str = "usage") -> LeaseCounters:
    """The `usage` of an exit report: the counters without their lease id, which the URL gives."""
    return _counters({**_obj(data, path), "lease": lease}, path)


def parse_report(data: Any) -> Report:
    body = _obj(data, "")
    return Report(
        boot_epoch=_int(body, "boot_epoch", "", 0, 2**31 - 1),
        seq=_int(body, "seq", "", 1),
        sent_at=_when(body, "sent_at", ""),
        gpus=[_gpu(g, f"gpus[{i}]") for i, g in enumerate(_list(body, "gpus", "", MAX_GPUS))],
        leases=[_counters(c, f"leases[{i}]") for i, c in enumerate(_list(body, "leases", "", MAX_LEASES))],
    )
