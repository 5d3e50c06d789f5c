"""Usage reports as the agent sends them (docs/agent.md §Protocol, `POST usage`), checked field by field.

Hand-written rather than a DRF serializer: the ingest path takes thousands of GPU samples a second
(bench/usage.py) and a nested serializer costs more per report than the whole database write. The API's
request serializer (nodeagent/api/serializers.py) documents the same shape in the OpenAPI schema. Every
refusal names the field (`gpus[3].util_pct`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from market.selectors.usage import UsageSummary
from nodeagent.errors import NodeError

LOG_TAIL_MAX = 64 * 1024
MAX_GPUS = 64
MAX_LEASES = 256
MAX_PROCESSES = 1024
INT_MAX = 2**62


@dataclass(frozen=True)
class LeaseCounters(UsageSummary):
    """One lease's cumulative counters on one node, from the job's start: the market's per-lease figures
    (market.selectors.usage.UsageSummary, what settlement and the job page read once summed over nodes), plus
    what only the agent reports."""

    # The job's newest checkpoint in this lease as its agent saw it (docs/agent.md §Checkpoints); None when
    # it made none yet, or from an agent that does not report them.
    checkpoint_at: datetime | None = None


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


class _Bad(Exception):
    """A refusal inside one object; the caller that knows where the object sits names the field. Paths are
    built only on this path, never for a good report."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


def _obj(data: Any) -> dict[str, Any]:
    if type(data) is not dict:
        raise _Bad("", "must be an object")
    return data


def _int(data: dict[str, Any], key: str, low: int = 0, high: int = INT_MAX) -> int:
    value = data.get(key)
    if type(value) is int and low <= value <= high:
        return value
    raise _Bad(key, f"must be a whole number between {low} and {high}")


def _num(data: dict[str, Any], key: str, high: float = 1e15) -> float:
    value = data.get(key)
    # NaN fails both comparisons and infinity the upper one: no separate finiteness test needed.
    if (type(value) is float or type(value) is int) and 0 <= value <= high:
        return float(value)
    raise _Bad(key, f"must be a number between 0 and {high:g}")


def _when(data: dict[str, Any], key: str) -> tuple[datetime, str]:
    """The time and its text as sent (kept as it is in the stored samples)."""
    value = data.get(key)
    text: str | None = value if type(value) is str and len(value) <= 40 else None
    try:
        # fromisoformat (C) reads what the agent sends ("...+00:00" or "...Z") at a tenth of a regex's cost.
        parsed = datetime.fromisoformat(text) if text is not None else None
    except ValueError:
        parsed = None
    if text is None or parsed is None or parsed.tzinfo is None:
        raise _Bad(key, "must be an ISO 8601 time with a zone")
    return parsed, text


def _list(data: dict[str, Any], key: str, most: int) -> list[Any]:
    value = data.get(key, [])
    if type(value) is not list:
        raise _Bad(key, "must be a list")
    if len(value) > most:
        raise _Bad(key, f"has {len(value)} entries; at most {most}")
    return value


_PROCESS_KEYS = frozenset({"pid", "used_mb", "lease"})
_GPU_KEYS = frozenset(
    {"uuid", "at", "healthy", "util_pct", "mem_used_mb", "power_w", "energy_j", "processes"}
)


def _process(data: Any) -> dict[str, Any]:
    proc = _obj(data)
    lease = proc.get("lease")
    if lease is not None and type(lease) is not int:
        raise _Bad("lease", "must be a lease id or null")
    _int(proc, "pid")
    _num(proc, "used_mb")
    # Stored as sent when it has exactly the known keys (the agent's case): no copy to build.
    return proc if proc.keys() == _PROCESS_KEYS else {k: proc.get(k) for k in _PROCESS_KEYS}


def _gpu(data: Any) -> dict[str, Any]:
    gpu = _obj(data)
    uuid = gpu.get("uuid")
    if type(uuid) is not str or not 0 < len(uuid) <= 96:
        raise _Bad("uuid", "must be a GPU UUID (1 to 96 characters)")
    if type(gpu.get("healthy", True)) is not bool:
        raise _Bad("healthy", "must be true or false")
    _when(gpu, "at")
    _num(gpu, "util_pct", 100)
    for key in ("mem_used_mb", "power_w", "energy_j"):
        _num(gpu, key)
    processes = _list(gpu, "processes", MAX_PROCESSES)
    checked = []
    for j, raw in enumerate(processes):
        try:
            checked.append(_process(raw))
        except _Bad as exc:
            raise _Bad(f"processes[{j}]" + (f".{exc.key}" if exc.key else ""), exc.message) from None
    if gpu.keys() == _GPU_KEYS and all(a is b for a, b in zip(checked, processes, strict=True)):
        return gpu
    return {**{k: gpu.get(k) for k in _GPU_KEYS}, "healthy": gpu.get("healthy", True), "processes": checked}


def _counters(data: Any) -> LeaseCounters:
    c = _obj(data)
    tail = c.get("log_tail", "")
    if type(tail) is not str:
        raise _Bad("log_tail", "must be text")
    return LeaseCounters(
        lease=_int(c, "lease", 1),
        gpu_seconds=_num(c, "gpu_seconds"),
        energy_j=_num(c, "energy_j"),
        util_avg=_num(c, "util_avg", 100),
        util_max=_num(c, "util_max", 100),
        mem_avg_mb=_num(c, "mem_avg_mb"),
        mem_max_mb=_num(c, "mem_max_mb"),
        samples=_int(c, "samples"),
        # The newest 64 KiB is what the owner wants to read; an agent sending more is cut, not refused.
        log_tail=tail[-LOG_TAIL_MAX:].replace("\x00", ""),
        checkpoint_at=_when(c, "checkpoint_at")[0] if c.get("checkpoint_at") is not None else None,
    )


def _each(items: list[Any], name: str, check: Any) -> list[Any]:
    out = []
    for i, item in enumerate(items):
        try:
            out.append(check(item))
        except _Bad as exc:
            raise NodeError(exc.message, field=f"{name}[{i}]" + (f".{exc.key}" if exc.key else "")) from None
    return out


def parse_counters(data: Any, *, lease: int, path: str = "usage") -> LeaseCounters:
    """The `usage` of an exit report: the counters without their lease id, which the URL gives."""
    if type(data) is not dict:
        raise NodeError("must be an object", field=path)
    try:
        return _counters({**data, "lease": lease})
    except _Bad as exc:
        raise NodeError(exc.message, field=f"{path}.{exc.key}") from None


def parse_report(data: Any) -> Report:
    try:
        body = _obj(data)
        head = (_int(body, "boot_epoch", 0, 2**31 - 1), _int(body, "seq", 1), _when(body, "sent_at")[0])
        gpus, leases = _list(body, "gpus", MAX_GPUS), _list(body, "leases", MAX_LEASES)
    except _Bad as exc:
        raise NodeError(exc.message, field=exc.key or "body") from None
    return Report(
        boot_epoch=head[0],
        seq=head[1],
        sent_at=head[2],
        gpus=_each(gpus, "gpus", _gpu),
        leases=_each(leases, "leases", _counters),
    )


# proto adapter: replaced by the usage branch
MAX_TICKS = 360
_SAMPLE_KEYS = frozenset(
    {"gpus", "t", "util", "mem_mb", "power_w", "energy_j", "lease", "foreign", "processes"}
)


@dataclass(frozen=True)
class Samples:
    """A protocol 2 report's samples as columns: one row per tick, one entry per GPU (docs/agent.md)."""

    gpus: list[str]
    t: list[float]
    util: list[list[float]]
    mem_mb: list[list[float]]
    power_w: list[list[float]]
    energy_j: list[list[float]]
    lease: list[list[int]]
    foreign: list[list[int]]
    processes: list[dict[str, Any]]


def parse_samples(data: Any, *, path: str = "usage") -> Samples:
    if type(data) is not dict:
        raise NodeError("must be an object", field=path)
    unknown = sorted(set(data) - _SAMPLE_KEYS)
    if unknown:
        raise NodeError("is not a field of the samples", field=f"{path}.{unknown[0]}")
    try:
        gpus = _list(data, "gpus", MAX_GPUS)
        t = _list(data, "t", MAX_TICKS)
    except _Bad as exc:
        raise NodeError(exc.message, field=f"{path}.{exc.key}") from None
    for j, uuid in enumerate(gpus):
        if type(uuid) is not str or not 0 < len(uuid) <= 96:
            raise NodeError("must be a GPU UUID (1 to 96 characters)", field=f"{path}.gpus[{j}]")
    for i, when in enumerate(t):
        if type(when) not in (int, float) or not 0 < when < 1e11 or (i and when <= t[i - 1]):
            raise NodeError("must be epoch seconds, ascending", field=f"{path}.t[{i}]")
    columns: dict[str, list[list[Any]]] = {}
    for key, high, whole in (
        ("util", 100.0, False),
        ("mem_mb", 1e9, False),
        ("power_w", 1e6, False),
        ("energy_j", 1e15, False),
        ("lease", float(INT_MAX), True),
        ("foreign", 1e6, True),
    ):
        rows = data.get(key, [])
        if type(rows) is not list or len(rows) != len(t):
            raise NodeError(f"must be a list of {len(t)} rows, one per tick", field=f"{path}.{key}")
        for i, row in enumerate(rows):
            if type(row) is not list or len(row) != len(gpus):
                raise NodeError(f"must have {len(gpus)} entries, one per GPU", field=f"{path}.{key}[{i}]")
            for j, value in enumerate(row):
                ok = type(value) is int if whole else type(value) in (int, float)
                if not ok or not 0 <= value <= high:
                    raise NodeError(
                        f"must be a number between 0 and {high:g}", field=f"{path}.{key}[{i}][{j}]"
                    )
        columns[key] = rows
    try:
        processes = _list(data, "processes", MAX_PROCESSES)
    except _Bad as exc:
        raise NodeError(exc.message, field=f"{path}.{exc.key}") from None
    for j, proc in enumerate(processes):
        if type(proc) is not dict or proc.get("gpu") not in gpus:
            raise NodeError("must be an object naming one of the GPUs", field=f"{path}.processes[{j}]")
        try:
            _process(proc)
        except _Bad as exc:
            raise NodeError(exc.message, field=f"{path}.processes[{j}].{exc.key}") from None
    return Samples(gpus=gpus, t=[float(x) for x in t], processes=processes, **columns)
