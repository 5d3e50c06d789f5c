"""Scenario files (`*.toml`), read exactly as shared/traces/README.md describes them."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.sim.errors import InputError

MICRO = 1_000_000
# A scenario without [pricing] still needs a price so that budgets mean something: 1 credit per GPU-hour.
DEFAULT_RESERVE_MICRO = MICRO


@dataclass(frozen=True)
class Pool:
    gpu_type: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Tenant:
    name: str
    guaranteed: dict[str, int]
    weight: float
    budget_micro: int | None  # None = unlimited


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    jobs_path: Path
    round_s: int
    pools: tuple[Pool, ...]
    tenants: tuple[Tenant, ...]
    reserve_micro: dict[str, int]  # per GPU type, micro-credits per GPU-hour
    # Every job checkpoints every this many minutes of its own progress; a preempted job redoes the progress
    # since its last checkpoint. 0 (the default, key absent) = a preempted job keeps all its progress.
    checkpoint_min: int = 0

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(p.gpu_type for p in self.pools)

    def tenant_index(self) -> dict[str, int]:
        return {t.name: i for i, t in enumerate(self.tenants)}


class _Located:
    """Finds the line of the n-th `[[table]]` header so semantic errors point at the right place."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = str(path)
        self.lines = text.splitlines()

    def line_of(self, header: str, index: int) -> int | None:
        seen = 0
        for number, raw in enumerate(self.lines, start=1):
            if raw.strip().startswith(f"[[{header}]]"):
                if seen == index:
                    return number
                seen += 1
        return None

    def line_of_key(self, key: str) -> int | None:
        for number, raw in enumerate(self.lines, start=1):
            if raw.split("=", 1)[0].strip() == key:
                return number
        return None

    def fail(self, line: int | None, message: str) -> InputError:
        return InputError(self.path, line, message)


def _int_field(loc: _Located, line: int | None, table: dict[str, Any], key: str, minimum: int) -> int:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise loc.fail(line, f"'{key}' must be an integer, got {value!r}")
    if value < minimum:
        raise loc.fail(line, f"'{key}' must be at least {minimum}, got {value}")
    return value


def _credits_to_micro(loc: _Located, line: int | None, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise loc.fail(line, f"{what} must be a non-negative number of credits, got {value!r}")
    return round(value * MICRO)


def _read_pools(loc: _Located, data: dict[str, Any]) -> tuple[Pool, ...]:
    raw = data.get("pools")
    if not isinstance(raw, list) or not raw:
        raise loc.fail(None, "needs at least one [[pools]] table")
    pools: list[Pool] = []
    for i, table in enumerate(raw):
        line = loc.line_of("pools", i)
        gpu_type = table.get("gpu_type")
        if not isinstance(gpu_type, str) or not gpu_type or "|" in gpu_type:
            raise loc.fail(line, f"pool 'gpu_type' must be a non-empty name without '|', got {gpu_type!r}")
        if any(p.gpu_type == gpu_type for p in pools):
            raise loc.fail(line, f"GPU type {gpu_type!r} has two [[pools]] tables")
        nodes = _int_field(loc, line, table, "nodes", 1)
        pools.append(Pool(gpu_type, nodes, _int_field(loc, line, table, "gpus_per_node", 1)))
    return tuple(pools)


def _read_tenant(loc: _Located, index: int, table: dict[str, Any], pools: tuple[Pool, ...]) -> Tenant:
    line = loc.line_of("tenants", index)
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise loc.fail(line, f"tenant 'name' must be a non-empty string, got {name!r}")
    guaranteed_raw = table.get("guaranteed", {})
    if not isinstance(guaranteed_raw, dict):
        raise loc.fail(line, f"tenant {name!r}: 'guaranteed' must be a table of GPUs per type")
    known = {p.gpu_type for p in pools}
    guaranteed: dict[str, int] = {}
    for gpu_type in guaranteed_raw:
        if gpu_type not in known:
            raise loc.fail(line, f"tenant {name!r} is guaranteed GPU type {gpu_type!r}, which has no pool")
        guaranteed[gpu_type] = _int_field(loc, line, guaranteed_raw, gpu_type, 0)
    weight = table.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        raise loc.fail(line, f"tenant {name!r}: 'weight' must be a positive number, got {weight!r}")
    budget = table.get("budget")
    budget_micro = None if budget is None else _credits_to_micro(loc, line, f"tenant {name!r} budget", budget)
    return Tenant(name, guaranteed, float(weight), budget_micro)


def _read_tenants(loc: _Located, data: dict[str, Any], pools: tuple[Pool, ...]) -> tuple[Tenant, ...]:
    raw = data.get("tenants")
    if not isinstance(raw, list) or not raw:
        raise loc.fail(None, "needs at least one [[tenants]] table")
    tenants: list[Tenant] = []
    for i, table in enumerate(raw):
        tenant = _read_tenant(loc, i, table, pools)
        if any(t.name == tenant.name for t in tenants):
            raise loc.fail(loc.line_of("tenants", i), f"tenant {tenant.name!r} is defined twice")
        tenants.append(tenant)
    for pool in pools:
        total = sum(t.guaranteed.get(pool.gpu_type, 0) for t in tenants)
        if total > pool.gpus:
            # Guarantees the cluster cannot honour make every guarantee figure meaningless.
            raise loc.fail(None, f"guarantees for {pool.gpu_type} sum to {total}, above its {pool.gpus} GPUs")
    return tuple(tenants)


def _read_reserve(loc: _Located, data: dict[str, Any], pools: tuple[Pool, ...]) -> dict[str, int]:
    pricing = data.get("pricing", {})
    reserve = pricing.get("reserve", {}) if isinstance(pricing, dict) else None
    line = loc.line_of_key("reserve")
    if not isinstance(reserve, dict):
        raise loc.fail(line, "[pricing] 'reserve' must be a table of credits per GPU-hour per type")
    known = {p.gpu_type for p in pools}
    for gpu_type in reserve:
        if gpu_type not in known:
            raise loc.fail(line, f"reserve price for GPU type {gpu_type!r}, which has no pool")
    return {
        p.gpu_type: (
            _credits_to_micro(loc, line, f"reserve for {p.gpu_type}", reserve[p.gpu_type])
            if p.gpu_type in reserve
            else DEFAULT_RESERVE_MICRO
        )
        for p in pools
    }


def read_scenario(path: str | Path) -> Scenario:
    """Parse and check a scenario file; every problem is an InputError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read scenario: {exc.strerror}") from exc
    loc = _Located(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), getattr(exc, "lineno", None), f"not valid TOML: {exc}") from exc
    name = data.get("name", path.stem)
    jobs = data.get("jobs")
    if not isinstance(jobs, str) or not jobs:
        raise loc.fail(loc.line_of_key("jobs"), "'jobs' must name the jobs CSV (relative to this file)")
    round_s = _int_field(loc, loc.line_of_key("round_s"), data, "round_s", 1)
    pools = _read_pools(loc, data)
    checkpoint_min = 0
    if "checkpoint_min" in data:
        checkpoint_min = _int_field(loc, loc.line_of_key("checkpoint_min"), data, "checkpoint_min", 0)
    return Scenario(
        name=str(name),
        path=path,
        jobs_path=path.parent / jobs,
        round_s=round_s,
        pools=pools,
        tenants=_read_tenants(loc, data, pools),
        reserve_micro=_read_reserve(loc, data, pools),
        checkpoint_min=checkpoint_min,
    )
