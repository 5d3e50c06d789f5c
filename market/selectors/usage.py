"""Reads of measured usage: what a lease is charged, its summary and its series over time for its owner
(docs/agent.md §Billing from measurement). The rows are the market's (market.models.usage); nodeagent's
ingestion writes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal

import numpy as np
from django.db.models import Sum

from market.models import Lease, LeaseGpu, LeaseUsage
from market.selectors.policy import market_policy
from market.selectors.usage_samples import node_ticks

SECONDS_PER_HOUR = 3600
JOULES_PER_KWH = Decimal("3.6e6")


@dataclass(frozen=True)
class Measured:
    """A lease's usage summed over its nodes (a gang on several nodes reports from each)."""

    gpu_seconds: float
    energy_j: float


def lease_measured(*, lease_id: int) -> Measured:
    row = LeaseUsage.objects.filter(lease_id=lease_id).aggregate(s=Sum("gpu_seconds"), e=Sum("energy_j"))
    return Measured(gpu_seconds=float(row["s"] or 0), energy_j=float(row["e"] or 0))


def charge_for(*, gpu_seconds: float, energy_j: float, price: int, energy_price_kwh: int) -> int:
    """ceil(gpu_seconds x price / 3600) + ceil(energy_j / 3.6e6 x energy price), in micro-credits.

    Decimal keeps the rounding exact: the float the agent sent is taken at its shortest repr."""
    gpu = Decimal(repr(max(0.0, gpu_seconds))) * price / SECONDS_PER_HOUR
    energy = Decimal(repr(max(0.0, energy_j))) * energy_price_kwh / JOULES_PER_KWH
    return int(gpu.to_integral_value(ROUND_CEILING)) + int(energy.to_integral_value(ROUND_CEILING))


def measured_charge(*, lease_id: int, price: int) -> int:
    """What settlement charges a lease (before the cap at its hold, which the ledger applies)."""
    measured = lease_measured(lease_id=lease_id)
    return charge_for(
        gpu_seconds=measured.gpu_seconds,
        energy_j=measured.energy_j,
        price=price,
        energy_price_kwh=market_policy().energy_price_kwh,
    )


@dataclass(frozen=True)
class UsageSummary:
    """One lease's counters summed (or sample-weighted) over its nodes: what its owner sees."""

    lease: int
    gpu_seconds: float
    energy_j: float
    util_avg: float
    util_max: float
    mem_avg_mb: float
    mem_max_mb: float
    samples: int
    log_tail: str


def usage_combined(parts: list[LeaseUsage]) -> UsageSummary:
    """One lease's rows (one per node of its gang) as one summary."""
    samples = sum(p.samples for p in parts)

    def weighted(value: Callable[[LeaseUsage], float]) -> float:
        if not samples:
            return 0.0
        return round(sum(value(p) * p.samples for p in parts) / samples, 2)

    return UsageSummary(
        lease=parts[0].lease_id,
        gpu_seconds=sum(p.gpu_seconds for p in parts),
        energy_j=sum(p.energy_j for p in parts),
        util_avg=weighted(lambda p: p.util_avg),
        util_max=max(p.util_max for p in parts),
        mem_avg_mb=weighted(lambda p: p.mem_avg_mb),
        mem_max_mb=max(p.mem_max_mb for p in parts),
        samples=samples,
        log_tail="\n".join(p.log_tail for p in parts if p.log_tail),
    )


def job_log_tail(leases: list[Lease]) -> str:
    """The job's output tail: from its newest lease that reported any. `leases` oldest first, each with
    `usage_rows` (market.selectors.jobs.job_detail prefetches them)."""
    for lease in reversed(leases):
        rows = getattr(lease, "usage_rows", None)
        tail = usage_combined(rows).log_tail if rows else ""
        if tail:
            return tail
    return ""


SERIES_POINTS = 120  # at most this many points (plus the first) per node on a lease's charts


@dataclass(frozen=True)
class UsagePoint:
    """One stored report's samples of a lease's GPUs on one node."""

    at: datetime
    util_pct: float  # mean over the lease's GPUs
    mem_used_mb: float  # summed over them
    energy_j: float  # used by them since the lease's first report on the node


def lease_usage_series(*, lease: Lease, points: int = SERIES_POINTS) -> dict[str, list[UsagePoint]]:
    """Per node name, the lease's GPUs over time, from the stored samples (market.selectors.usage_samples:
    10-s ticks of the last days, 1-minute aggregates before; LeaseUsage keeps only cumulative summaries).
    Bounded: of a node's ticks in the lease's span, the first and then every k-th up to the newest are
    drawn, k chosen so that at most `points` + 1 are; a point is that tick's samples (a 1-minute row's
    means), so a spike between two points can be missed (the summary's maximum still shows it). Energy adds
    every tick's rise, drawn or not."""
    start = lease.running_at or lease.started_at
    uuids: dict[int, set[str]] = {}
    names: dict[int, str] = {}
    for node_id, name, uuid in LeaseGpu.objects.filter(lease=lease).values_list(
        "gpu__node_id", "gpu__node__name", "gpu__uuid"
    ):
        uuids.setdefault(node_id, set()).add(uuid)
        names[node_id] = name
    out: dict[str, list[UsagePoint]] = {}
    for node_id in sorted(uuids, key=names.__getitem__):
        # Later samples of these GPUs are another lease's.
        ticks = node_ticks(node_id=node_id, uuids=uuids[node_id], start=start, end=lease.ended_at)
        count = len(ticks.at)
        if not count:
            continue
        step = -(-count // points)
        used = np.nancumsum(np.nansum(ticks.energy_rise, axis=1))
        util = np.nanmean(ticks.util, axis=1)
        mem = np.nansum(ticks.mem_mb, axis=1)
        out[names[node_id]] = [
            UsagePoint(
                at=ticks.at[i],
                util_pct=round(float(util[i]), 2),
                mem_used_mb=float(mem[i]),
                energy_j=float(used[i]),
            )
            for i in range(count)
            if i == 0 or (i + 1) % step == count % step
        ]
    return out
