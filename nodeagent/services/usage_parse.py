"""Usage reports as the agent sends them (docs/agent.md §Protocol, `POST usage`), checked field by field.

Hand-written rather than a DRF serializer: the ingest path takes thousands of GPU samples a second
(bench/usage.py) and a nested serializer costs more per report than the whole database write. The API's
request serializer (nodeagent/api/serializers.py) documents the same shape in the OpenAPI schema. Every
refusal names the field (`gpus[3].util_pct`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

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


# Protocol 2's usage block (docs/agent.md §Protocol `POST report`): columns of ticks x GPUs. Every cell is
# checked, at a cost per cell of a type lookup and a numpy comparison: the ingest's budget is 50 µs of web CPU
# per GPU sample all in (bench/usage.py), seven cells each.

MAX_TICKS = 360
# The stored widths (market.models.usage_blob) bound what a cell may hold: power in tenths of a watt in 16
# bits, memory in whole MB in 32, a foreign-process count in 8; the others are checked as before.
_RANGES: dict[str, tuple[float, float, bool]] = {  # column: (low, high, whole numbers only)
    "util": (0, 100, False),
    "mem_mb": (0, 2**32 - 1, False),
    "power_w": (0, 6553.5, False),
    "energy_j": (0, 1e15, False),
    "lease": (0, 2**53, True),
    "foreign": (0, 255, True),
}
_NUMBER = frozenset({int, float})
_WHOLE = frozenset({int})
# Tick times: after 2001 and before 2286 (epoch seconds), so that a unit mistake (milliseconds) is refused.
_T_RANGE = (1e9, 1e10)


@dataclass(frozen=True)
class Samples:
    """A report's samples since the last one, validated: each matrix is ticks x GPUs (float64, the lease and
    foreign columns int64), `t` epoch seconds ascending, `gpus` the columns' UUIDs."""

    gpus: tuple[str, ...]
    t: npt.NDArray[np.float64]
    util: npt.NDArray[np.float64]
    mem_mb: npt.NDArray[np.float64]
    power_w: npt.NDArray[np.float64]
    energy_j: npt.NDArray[np.float64]
    lease: npt.NDArray[np.int64]
    foreign: npt.NDArray[np.int64]
    processes: tuple[dict[str, Any], ...] = ()

    @property
    def ticks(self) -> int:
        return len(self.t)

    def lease_util(self, leases: list[int]) -> npt.NDArray[np.float64]:
        """Ticks x leases: each lease's utilisation at each tick, the busiest GPU its process is on (0 where
        it has none), as protocol 1's Report.lease_util for its one tick."""
        out = np.zeros((self.ticks, len(leases)))
        for j, lease in enumerate(leases):
            mine = self.lease == lease
            if mine.any():
                out[:, j] = np.where(mine, self.util, 0.0).max(axis=1)
        return out


def _cell(path: str, name: str, i: int, j: int | None, message: str) -> NodeError:
    where = f"{path}.{name}[{i}]" + (f"[{j}]" if j is not None else "")
    return NodeError(message, field=where)


def _matrix(body: dict[str, Any], name: str, shape: tuple[int, int], path: str) -> npt.NDArray[Any]:
    rows = body.get(name)
    ticks, gpus = shape
    if type(rows) is not list or len(rows) != ticks:
        raise NodeError(f"must be a list of {ticks} rows (one per tick)", field=f"{path}.{name}")
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != gpus:
            raise _cell(path, name, i, None, f"must be a list of {gpus} numbers (one per GPU)")
    low, high, whole = _RANGES[name]
    allowed = _WHOLE if whole else _NUMBER
    if not set(map(type, chain.from_iterable(rows))) <= allowed:
        for i, row in enumerate(rows):  # the refusal's path only: find the cell
            for j, value in enumerate(row):
                if type(value) not in allowed:
                    raise _cell(path, name, i, j, "must be a whole number" if whole else "must be a number")
    values = np.array(rows, dtype=np.float64)
    # NaN fails both comparisons and infinity one: no separate finiteness test.
    bad = ~((values >= low) & (values <= high))
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise _cell(path, name, i, j, f"must be between {low:g} and {high:g}")
    return values.astype(np.int64) if whole else values


_LOW = np.array([low for low, _, _ in _RANGES.values()])[:, None, None]
_HIGH = np.array([high for _, high, _ in _RANGES.values()])[:, None, None]
_WHOLE_COLUMNS = [name for name, (_, _, whole) in _RANGES.items() if whole]
_NUMBER_COLUMNS = [name for name, (_, _, whole) in _RANGES.items() if not whole]


def _columns_fast(body: dict[str, Any], shape: tuple[int, int]) -> dict[str, npt.NDArray[Any]] | None:
    """Every column checked at once (one conversion, one range test over all cells); None at the first doubt,
    without saying where: _matrix says it, on the refusal's path only."""
    ticks, gpus = shape
    matrices = [body.get(name) for name in _RANGES]
    for rows in matrices:
        if type(rows) is not list or len(rows) != ticks:
            return None
        for row in rows:
            if type(row) is not list or len(row) != gpus:
                return None
    cells = chain.from_iterable
    if not set(map(type, cells(cells(body[n] for n in _NUMBER_COLUMNS)))) <= _NUMBER:
        return None
    if not set(map(type, cells(cells(body[n] for n in _WHOLE_COLUMNS)))) <= _WHOLE:
        return None
    values = np.array(matrices, dtype=np.float64)
    # NaN fails both comparisons and infinity one: no separate finiteness test.
    if not ((values >= _LOW) & (values <= _HIGH)).all():
        return None
    out: dict[str, npt.NDArray[Any]] = {}
    for k, (name, (_, _, whole)) in enumerate(_RANGES.items()):
        out[name] = values[k].astype(np.int64) if whole else values[k]
    return out


def _processes(data: Any, gpus: tuple[str, ...], path: str) -> tuple[dict[str, Any], ...]:
    items = data if data is not None else []
    if type(items) is not list or len(items) > MAX_PROCESSES:
        raise NodeError(f"must be a list of at most {MAX_PROCESSES}", field=f"{path}.processes")
    known = set(gpus)
    out = []
    for k, raw in enumerate(items):
        try:
            proc = _obj(raw)
            if proc.get("gpu") not in known:
                raise _Bad("gpu", "must be one of usage.gpus")
            lease = proc.get("lease")
            if lease is not None and type(lease) is not int:
                raise _Bad("lease", "must be a lease id or null")
            out.append(
                {
                    "gpu": proc["gpu"],
                    "pid": _int(proc, "pid"),
                    "used_mb": _num(proc, "used_mb"),
                    "lease": lease,
                }
            )
        except _Bad as exc:
            raise NodeError(
                exc.message, field=f"{path}.processes[{k}]" + (f".{exc.key}" if exc.key else "")
            ) from None
    return tuple(out)


def parse_samples(data: Any, *, path: str = "usage") -> Samples:
    """Protocol 2's `usage` block, every cell checked; a refusal names the cell (`usage.util[3][1]`)."""
    if type(data) is not dict:
        raise NodeError("must be an object", field=path)
    gpus = data.get("gpus")
    if (
        type(gpus) is not list
        or not 0 < len(gpus) <= MAX_GPUS
        or not all(type(u) is str and 0 < len(u) <= 96 for u in gpus)
        or len(set(gpus)) != len(gpus)
    ):
        raise NodeError(
            f"must be 1 to {MAX_GPUS} distinct GPU UUIDs (1 to 96 characters)", field=f"{path}.gpus"
        )
    t = data.get("t")
    if type(t) is not list or not 0 < len(t) <= MAX_TICKS or not set(map(type, t)) <= _NUMBER:
        raise NodeError(f"must be a list of 1 to {MAX_TICKS} times (epoch seconds)", field=f"{path}.t")
    times = np.array(t, dtype=np.float64)
    bad = ~((times >= _T_RANGE[0]) & (times <= _T_RANGE[1]))
    bad[1:] |= ~(np.diff(times) > 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise NodeError("must be epoch seconds, each after the one before", field=f"{path}.t[{i}]")
    shape = (len(t), len(gpus))
    columns = _columns_fast(data, shape)
    if columns is None:  # some cell is wrong: the column by column check finds and names it
        columns = {name: _matrix(data, name, shape, path) for name in _RANGES}
    return Samples(
        gpus=tuple(gpus),
        t=times,
        **columns,
        processes=_processes(data.get("processes"), tuple(gpus), path),
    )


def parse_leases(data: Any, *, path: str = "leases") -> list[LeaseCounters]:
    """A report's `leases`: each lease's cumulative counters, as in protocol 1's usage report."""
    if data is None:
        return []
    if type(data) is not list or len(data) > MAX_LEASES:
        raise NodeError(f"must be a list of at most {MAX_LEASES}", field=path)
    return _each(data, path, _counters)


def samples_from_report(report: Report) -> Samples | None:
    """Protocol 1's one-tick report as protocol 2's columns (each GPU's lease: the first of its processes
    that names one; foreign: its processes that name none). None when it has no GPU."""
    if not report.gpus:
        return None
    gpus = report.gpus
    at = datetime.fromisoformat(gpus[0]["at"]).timestamp()

    def row(key: str, high: float) -> list[float]:
        # Protocol 1 took memory and power up to 1e15; the stored widths (usage_blob) hold less.
        return [min(float(g[key]), high) for g in gpus]

    leases = [next((p["lease"] for p in g["processes"] if p["lease"] is not None), 0) for g in gpus]
    return Samples(
        gpus=tuple(g["uuid"] for g in gpus),
        t=np.array([at]),
        util=np.array([row("util_pct", _RANGES["util"][1])]),
        mem_mb=np.array([row("mem_used_mb", _RANGES["mem_mb"][1])]),
        power_w=np.array([row("power_w", _RANGES["power_w"][1])]),
        energy_j=np.array([row("energy_j", _RANGES["energy_j"][1])]),
        lease=np.array([leases], dtype=np.int64),
        foreign=np.array(
            [[min(255, sum(p["lease"] is None for p in g["processes"])) for g in gpus]], dtype=np.int64
        ),
        processes=tuple({"gpu": g["uuid"], **p} for g in gpus for p in g["processes"]),
    )
