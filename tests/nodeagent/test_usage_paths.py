"""The ingest's two ways of writing rows (nodeagent.services.usage): COPY through a staging table for a batch,
one INSERT ... VALUES for a few rows (and always on SQLite, where MAX(a, b) stands for GREATEST(a, b)). The same
batch through each, and through SQLite itself, must leave the same rows and count the same reports as new."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from market.models import LeaseUsage, UsageColumns, UsageSample
from market.selectors.policy import market_policy
from nodeagent.models import UsageMark
from nodeagent.services import usage
from nodeagent.services.usage_parse import Report, parse_report
from tests.nodeagent.agents import counters, register
from tests.sqlite_twin import on_sqlite

pytestmark = pytest.mark.django_db

# The reports carry the real time (their samples are stored only near the server's clock): the same instant
# for every ingest of the run.
NOW = datetime.now(UTC)


def _batch(running: Any) -> list[tuple[int, Report]]:
    """Reports from the lease's node and from a node that has none of its GPUs (its counters are dropped), with
    idle and busy spells, repeats inside the batch and in any order."""
    world, agent, _, lease = running
    other = register(world, "n2")
    rng = random.Random(29)
    reports = []
    for seq in range(1, 41):
        mine = counters(lease, 10.0 * seq, util_avg=rng.uniform(0, 100), log_tail=f"step {seq}\n")
        body = agent.report([mine], util=rng.choice([1.0, 5.0, 50.0, 95.0]), seq=seq)
        reports.append((agent.node.pk, parse_report(body)))
        reports.append((other.node.pk, parse_report(other.report([counters(lease, 5.0 * seq)], seq=seq))))
    reports += rng.sample(reports, 20)
    rng.shuffle(reports)
    return reports


def _rows() -> tuple[list[Any], ...]:
    columns = dict(UsageColumns.objects.values_list("pk", "uuids"))
    reports = [
        (*r[:5], columns.get(r[5]), bytes(r[6]))
        for r in UsageSample.objects.values_list(
            "node_id", "boot_epoch", "seq", "at", "ticks", "columns_id", "data"
        )
    ]
    leases = LeaseUsage.objects.values_list(
        "lease_id", "node_id", "gpu_seconds", "energy_j", "util_avg", "util_max", "mem_avg_mb", "mem_max_mb",
        "samples", "log_tail", "idle_since",
    )  # fmt: skip
    return (
        sorted(reports, key=lambda r: r[:3]),
        sorted(UsageMark.objects.values_list("node_id", "boot_epoch", "seq")),
        sorted(leases),
    )


def _ingest(reports: list[tuple[int, Report]]) -> int:
    """In batches of 30, so later batches meet rows the earlier ones wrote (the ON CONFLICT updates)."""
    return sum(usage.usage_ingest(reports=reports[i : i + 30], now=NOW) for i in range(0, len(reports), 30))


def test_copy_and_values_store_the_same_rows(running, monkeypatch):
    policy = market_policy()
    policy.idle_util_pct = 10
    policy.save()
    reports = _batch(running)
    seen = {}
    for path, threshold in (("copy", -1), ("values", 10**9)):
        monkeypatch.setattr(usage, "COPY_FROM_ROWS", threshold)
        LeaseUsage.objects.all().delete()
        UsageMark.objects.all().delete()
        UsageSample.objects.all().delete()
        new = _ingest(reports)
        rows = _rows()
        assert _ingest(reports) == 0 and _rows() == rows  # repeating it all changes nothing
        seen[path] = (new, rows)
    assert seen["copy"] == seen["values"]
    new, (stored, marks, leases) = seen["copy"]
    assert new == len(stored) == 80 and len(marks) == 2
    assert len(leases) == 1 and leases[0][2] == 400.0  # the other node's counters were dropped


def test_sqlite_keeps_the_same_rows_as_postgresql(running, monkeypatch):
    """SQLite (make run's default) takes the VALUES path with MAX(a, b) where PostgreSQL has GREATEST(a, b):
    a scalar MAX that PostgreSQL rejects, so it runs on an in-memory SQLite twin holding the same rows. The
    batches come shuffled, so later ones meet stored counters and marks larger than their own (kept) and
    smaller (replaced), and idle spells that start, continue and end."""
    policy = market_policy()
    policy.idle_util_pct = 10
    policy.save()
    reports = _batch(running)
    # Repeating single reports afterwards, as the report view sends them: every one a duplicate.
    again = random.Random(31).sample(reports, 10)

    def ingest() -> tuple[int, int, tuple[list[Any], ...]]:
        new = _ingest(reports)
        repeated = sum(usage.usage_ingest(reports=[one], now=NOW) for one in again)
        return new, repeated, _rows()

    with on_sqlite():
        on_sqlite_ = ingest()
    on_postgres = ingest()
    assert on_postgres == on_sqlite_
    new, repeated, (stored, marks, leases) = on_postgres
    assert (new, repeated) == (80, 0) and len(stored) == 80
    assert sorted(seq for _, _, seq in marks) == [40, 40]  # the largest seq of each node, whatever the order
    assert len(leases) == 1 and leases[0][2] == 400.0
