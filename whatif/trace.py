"""A workload trace as plain data, and its writer in the simulator's scenario format (shared/traces/README.md:
a TOML scenario beside a CSV of jobs). No Django here: `whatif.history` fills a Trace from the database."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

MICRO = 1_000_000
COLUMNS = ("job_id", "submit_s", "tenant", "gpus", "duration_s", "gpu_type", "price")


@dataclass(frozen=True)
class TracePool:
    gpu_type: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class TraceTenant:
    name: str
    guaranteed: dict[str, int]  # GPUs per type name
    weight: int
    budget_micro: int | None  # None: unlimited


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_s: int  # seconds from the start of the window
    tenant: str
    gpus: int
    duration_s: int
    gpu_types: tuple[str, ...]  # acceptable types, best first
    price_micro: int | None  # limit per GPU-hour; None: the tenant bids the reserve


@dataclass(frozen=True)
class Trace:
    name: str
    round_s: int
    pools: tuple[TracePool, ...]
    tenants: tuple[TraceTenant, ...]
    reserve_micro: dict[str, int]  # per pool type
    jobs: tuple[TraceJob, ...]
    notes: tuple[str, ...] = ()  # what the export had to approximate; written as TOML comments
    checkpoint_min: int = 0  # every job checkpoints this often (minutes of progress); 0: none, key left out


def _quoted(text: str) -> str:
    """A TOML basic string: JSON's escapes (\\", \\\\, \\n, \\uXXXX) are all valid TOML escapes."""
    return json.dumps(text, ensure_ascii=True)


def _credits(micro: int) -> str:
    """Exact decimal credits (the reader turns them back into the same micro-credits)."""
    text = format(Decimal(micro) / MICRO, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{_quoted(k)} = {v}" for k, v in values.items()) + " }"


def scenario_text(trace: Trace, jobs_file: str) -> str:
    lines = [f"# {note}" for note in trace.notes]
    lines += [
        f"name = {_quoted(trace.name)}",
        f"jobs = {_quoted(jobs_file)}",
        f"round_s = {trace.round_s}",
        # a top-level key, so before the first table; left out at 0 (the reader's default)
        *([f"checkpoint_min = {trace.checkpoint_min}"] if trace.checkpoint_min else []),
        "",
        "[pricing]",
        f"reserve = {_table({t: _credits(v) for t, v in trace.reserve_micro.items()})}",
    ]
    for pool in trace.pools:
        lines += [
            "",
            "[[pools]]",
            f"gpu_type = {_quoted(pool.gpu_type)}",
            f"nodes = {pool.nodes}",
            f"gpus_per_node = {pool.gpus_per_node}",
        ]
    for tenant in trace.tenants:
        lines += [
            "",
            "[[tenants]]",
            f"name = {_quoted(tenant.name)}",
            f"guaranteed = {_table({t: str(g) for t, g in tenant.guaranteed.items()})}",
            f"weight = {tenant.weight}",
        ]
        if tenant.budget_micro is not None:
            lines.append(f"budget = {_credits(tenant.budget_micro)}")
    return "\n".join(lines) + "\n"


def jobs_path_of(scenario: Path) -> Path:
    """`name.toml` -> `name.jobs.csv`, beside it (the shipped traces' convention)."""
    return scenario.with_name(scenario.stem + ".jobs.csv")


def write_trace(trace: Trace, scenario: Path) -> Path:
    """Write `scenario` (a .toml path) and its jobs CSV beside it; returns the scenario path."""
    scenario.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs_path_of(scenario)
    with jobs.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for job in trace.jobs:
            price = "" if job.price_micro is None else _credits(job.price_micro)
            row = (
                job.job_id,
                job.submit_s,
                job.tenant,
                job.gpus,
                job.duration_s,
                "|".join(job.gpu_types),
                price,
            )
            writer.writerow(row)
    scenario.write_text(scenario_text(trace, jobs.name), encoding="utf-8")
    return scenario


def anonymised(trace: Trace) -> Trace:
    """Tenants become tenant-01..., jobs j000001... in submit order; GPU types and all figures stay."""
    names = {t.name: f"tenant-{i:02d}" for i, t in enumerate(trace.tenants, start=1)}
    return replace(
        trace,
        name="gpumarket-anonymised",
        tenants=tuple(replace(t, name=names[t.name]) for t in trace.tenants),
        jobs=tuple(
            replace(job, job_id=f"j{i:06d}", tenant=names[job.tenant])
            for i, job in enumerate(trace.jobs, start=1)
        ),
    )
