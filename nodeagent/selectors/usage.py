"""Reads of measured usage: what a lease is charged, and its summary for its owner (docs/agent.md §Billing)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from django.db.models import Sum

from market.selectors.policy import market_policy
from nodeagent.models import LeaseUsage
from nodeagent.services.usage_parse import LeaseCounters

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


def usage_summaries(*, lease_ids: list[int]) -> dict[int, LeaseCounters]:
    """Each lease's summary over its nodes (averages weighted by samples), in one query."""
    rows = LeaseUsage.objects.filter(lease_id__in=lease_ids).order_by("lease_id", "node_id")
    out: dict[int, list[LeaseUsage]] = {}
    for row in rows:
        out.setdefault(row.lease_id, []).append(row)
    return {lease_id: usage_combined(parts) for lease_id, parts in out.items()}


def usage_combined(parts: list[LeaseUsage]) -> LeaseCounters:
    """One lease's rows (one per node of its gang) as one summary."""
    samples = sum(p.samples for p in parts)

    def weighted(attr: str) -> float:
        if not samples:
            return 0.0
        return round(sum(getattr(p, attr) * p.samples for p in parts) / samples, 2)

    return LeaseCounters(
        lease=parts[0].lease_id,
        gpu_seconds=sum(p.gpu_seconds for p in parts),
        energy_j=sum(p.energy_j for p in parts),
        util_avg=weighted("util_avg"),
        util_max=max(p.util_max for p in parts),
        mem_avg_mb=weighted("mem_avg_mb"),
        mem_max_mb=max(p.mem_max_mb for p in parts),
        samples=samples,
        log_tail="\n".join(p.log_tail for p in parts if p.log_tail),
    )
