"""Jobs files (`*.jobs.csv`), read exactly as shared/traces/README.md describes them, into columns."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from allocator.sim.errors import InputError
from allocator.sim.scenario import MICRO, Scenario

REQUIRED = ("job_id", "submit_s", "tenant", "gpus", "duration_s")
OPTIONAL = ("gpu_type", "price", "speed")


@dataclass(frozen=True)
class Jobs:
    """One row per job, sorted by submit time (file order breaks ties)."""

    ids: list[str]
    submit_s: npt.NDArray[np.int64]
    tenant: npt.NDArray[np.int64]
    gpus: npt.NDArray[np.int64]
    duration_s: npt.NDArray[np.int64]
    prefs: list[tuple[int, ...]]  # acceptable pool indices, best first
    price_micro: npt.NDArray[np.int64]  # [job, type] limit price per GPU-hour; 0 where not acceptable
    unknown_types: list[tuple[str, ...]]  # types a job named that no pool has (reported, not fatal)
    # [job, type] how fast each type runs the job: its runtime there is duration_s / speed. 1 where the
    # optional `speed` column is absent or does not name the type (docs/simulator.md §Per-type speeds).
    speed: npt.NDArray[np.float64] | None = None

    def speeds(self) -> npt.NDArray[np.float64]:
        """The speed matrix, ones when the trace has no speed column."""
        if self.speed is None:
            return np.ones((len(self.ids), len(self.price_micro[0]) if len(self.ids) else 0))
        return self.speed

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Row:
    job_id: str
    submit_s: int
    tenant: int
    gpus: int
    duration_s: int
    prefs: tuple[int, ...]
    unknown: tuple[str, ...]
    price_micro: int | None
    speed: dict[int, float]


class _RowReader:
    """Checks one CSV row at a time; knows the file and line for its messages."""

    def __init__(self, path: Path, scenario: Scenario) -> None:
        self.path = str(path)
        self.tenants = scenario.tenant_index()
        self.types = {t: i for i, t in enumerate(scenario.types)}
        self.seen: set[str] = set()

    def fail(self, line: int, message: str) -> InputError:
        return InputError(self.path, line, message)

    def integer(self, line: int, column: str, text: str, minimum: int) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise self.fail(line, f"'{column}' must be a whole number, got {text!r}") from None
        if value < minimum:
            raise self.fail(line, f"'{column}' must be at least {minimum}, got {value}")
        return value

    def price(self, line: int, text: str) -> int | None:
        if not text.strip():
            return None
        try:
            value = float(text)
        except ValueError:
            raise self.fail(line, f"'price' must be a number of credits per GPU-hour, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(line, f"'price' must be a non-negative number, got {text!r}")
        return round(value * MICRO)

    def speed(self, line: int, text: str) -> dict[int, float]:
        """`TYPE=FACTOR|TYPE=FACTOR`, e.g. `H100=2.5|A100=1|V100=0.4`; a type left out runs at speed 1."""
        out: dict[int, float] = {}
        for part in (p.strip() for p in text.split("|")):
            if not part:
                continue
            name, sep, value = (x.strip() for x in part.partition("="))
            if not sep or name not in self.types:
                raise self.fail(
                    line, f"'speed' must be TYPE=FACTOR for pool types {sorted(self.types)}, got {part!r}"
                )
            try:
                factor = float(value)
            except ValueError:
                raise self.fail(line, f"'speed' of {name} must be a number, got {value!r}") from None
            if not math.isfinite(factor) or factor <= 0:
                raise self.fail(line, f"'speed' of {name} must be a positive number, got {value!r}")
            out[self.types[name]] = factor
        return out

    def gpu_types(self, text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
        names = [n.strip() for n in text.split("|") if n.strip()]
        if not names:
            return tuple(range(len(self.types))), ()
        known = tuple(dict.fromkeys(self.types[n] for n in names if n in self.types))
        return known, tuple(n for n in names if n not in self.types)

    def row(self, line: int, cells: dict[str, str]) -> _Row:
        job_id = cells["job_id"].strip()
        if not job_id:
            raise self.fail(line, "'job_id' is empty")
        if job_id in self.seen:
            raise self.fail(line, f"job_id {job_id!r} appears twice")
        self.seen.add(job_id)
        tenant = cells["tenant"].strip()
        if tenant not in self.tenants:
            raise self.fail(line, f"unknown tenant {tenant!r} (the scenario defines {sorted(self.tenants)})")
        prefs, unknown = self.gpu_types(cells.get("gpu_type") or "")
        return _Row(
            job_id=job_id,
            submit_s=self.integer(line, "submit_s", cells["submit_s"], 0),
            tenant=self.tenants[tenant],
            gpus=self.integer(line, "gpus", cells["gpus"], 1),
            duration_s=self.integer(line, "duration_s", cells["duration_s"], 0),
            prefs=prefs,
            unknown=unknown,
            price_micro=self.price(line, cells.get("price") or ""),
            speed=self.speed(line, cells.get("speed") or ""),
        )


def _check_header(path: Path, header: list[str] | None) -> None:
    if header is None:
        raise InputError(str(path), 1, "empty file: expected a header row")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(str(path), 1, f"missing column(s) {', '.join(missing)} (header is {header})")


def _read_rows(path: Path, scenario: Scenario) -> list[_Row]:
    reader = _RowReader(path, scenario)
    rows: list[_Row] = []
    with path.open(newline="", encoding="utf-8") as handle:
        table = csv.reader(handle)
        header = next(table, None)
        _check_header(path, header)
        assert header is not None
        names = [h.strip() for h in header]
        for cells in table:
            if not any(c.strip() for c in cells):
                continue
            if len(cells) > len(names):
                raise reader.fail(table.line_num, f"{len(cells)} cells but the header has {len(names)}")
            padded = dict(zip(names, cells + [""] * (len(names) - len(cells)), strict=True))
            for column in REQUIRED:
                if not padded[column].strip():
                    raise reader.fail(table.line_num, f"'{column}' is empty")
            rows.append(reader.row(table.line_num, padded))
    return rows


def _price_matrix(rows: list[_Row], scenario: Scenario) -> npt.NDArray[np.int64]:
    """A job without a price bids each type's reserve; one with a price bids it on every type it accepts."""
    reserve = np.array([scenario.reserve_micro[t] for t in scenario.types], dtype=np.int64)
    prices = np.zeros((len(rows), len(reserve)), dtype=np.int64)
    for i, row in enumerate(rows):
        for k in row.prefs:
            prices[i, k] = reserve[k] if row.price_micro is None else row.price_micro
    return prices


def _speed_matrix(rows: list[_Row], scenario: Scenario) -> npt.NDArray[np.float64] | None:
    if not any(r.speed for r in rows):
        return None
    speed = np.ones((len(rows), len(scenario.types)))
    for i, row in enumerate(rows):
        for k, factor in row.speed.items():
            speed[i, k] = factor
    return speed


def read_jobs(scenario: Scenario, path: str | Path | None = None) -> Jobs:
    """Parse and check the scenario's jobs file; every problem is an InputError naming the file and line."""
    path = Path(path) if path is not None else scenario.jobs_path
    try:
        rows = _read_rows(path, scenario)
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read jobs: {exc.strerror}") from exc
    rows.sort(key=lambda r: r.submit_s)  # stable: file order breaks ties
    return Jobs(
        ids=[r.job_id for r in rows],
        submit_s=np.array([r.submit_s for r in rows], dtype=np.int64),
        tenant=np.array([r.tenant for r in rows], dtype=np.int64),
        gpus=np.array([r.gpus for r in rows], dtype=np.int64),
        duration_s=np.array([r.duration_s for r in rows], dtype=np.int64),
        prefs=[r.prefs for r in rows],
        price_micro=_price_matrix(rows, scenario),
        unknown_types=[r.unknown for r in rows],
        speed=_speed_matrix(rows, scenario),
    )
