"""A market with history for the portal's view tests: nodes, funded tenants, one round with a winner and a
loser in alpha, and an allowance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import World


@dataclass
class Market:
    world: World
    winner: Any  # alpha job that won the round
    loser: Any  # alpha job below the reserve price
    round: Any


@pytest.fixture
def market(world: World) -> Market:
    from market.models import Job
    from market.services.rounds import round_tick
    from tests.market.round_helpers import make_job

    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    winner = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 3}, name="winner")
    loser = make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 1}, name="loser")
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    return Market(world, Job.objects.get(pk=winner.pk), Job.objects.get(pk=loser.pk), rnd)


def login(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client


def report_usage(
    lease: Any,
    *,
    seconds: int,
    every: int = 60,
    util: tuple[float, ...] | None = None,
    log_tail: str = "",
) -> None:
    """What the lease's node agent reports over `seconds` from the job's start, one report every `every`
    seconds, stored through the real parse and ingest services (docs/agent.md `POST usage`): each GPU of the
    lease at utilisation util[k % len(util)] (by default a warm-up at 15% then 88-96%), 300 W, 30 GB used;
    the lease's cumulative counters."""
    from datetime import timedelta

    from market.models import LeaseGpu
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    gpus = list(LeaseGpu.objects.filter(lease=lease).select_related("gpu__node"))
    node = gpus[0].gpu.node
    start = lease.running_at or lease.started_at
    reports: list[Any] = []
    seen: list[float] = []
    for k in range(1, seconds // every + 1):
        at = (start + timedelta(seconds=k * every)).isoformat()
        pct = util[k % len(util)] if util else (15.0 if k <= 3 else 88.0 + (k * 5) % 9)
        seen.append(pct)
        samples = [
            {
                "uuid": g.gpu.uuid, "at": at, "healthy": True, "util_pct": pct, "mem_used_mb": 30_000,
                "power_w": 300.0, "energy_j": 5e6 + 300.0 * k * every,
                "processes": [{"pid": 4242, "used_mb": 30_000, "lease": lease.pk}],
            }
            for g in gpus
        ]  # fmt: skip
        counters = {
            "lease": lease.pk, "gpu_seconds": float(len(gpus) * k * every),
            "energy_j": 300.0 * len(gpus) * k * every, "util_avg": sum(seen) / k, "util_max": max(seen),
            "mem_avg_mb": 30_000, "mem_max_mb": 30_000, "samples": k, "log_tail": log_tail,
        }  # fmt: skip
        body = {"boot_epoch": 1, "seq": k, "sent_at": at, "gpus": samples, "leases": [counters]}
        reports.append((node.pk, parse_report(body)))
    usage_ingest(reports=reports)
