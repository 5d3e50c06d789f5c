"""Usage ingestion (ARCHITECTURE.md §Money: "node+epoch+seq for usage"; docs/agent.md §Billing).

A batch of reports is written in a fixed number of statements, whatever its size:

- the reports themselves, `ON CONFLICT DO NOTHING` on (node, boot epoch, seq): a repeated report is stored once;
- the high-water mark per (node, boot epoch): the largest seq seen;
- each lease's counters on each node: every cumulative counter keeps the largest value seen (GREATEST), and the
  averages and the log tail come from the report with the most samples, so a duplicated or late report
  changes nothing and reports may arrive in any order.

Counters for a lease the node has no GPU of, or for a lease already settled, are dropped: a node acts only on
its own leases, and a settled lease's charge is final.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from market.models import LeaseGpu, LeaseState
from market.selectors.policy import market_policy
from nodeagent.models import LeaseUsage, UsageMark, UsageReport
from nodeagent.services.usage_parse import LeaseCounters, Report

_COUNTER_COLUMNS = (
    "lease_id",
    "node_id",
    "gpu_seconds",
    "energy_j",
    "util_avg",
    "util_max",
    "mem_avg_mb",
    "mem_max_mb",
    "samples",
    "log_tail",
    "idle_since",
    "updated_at",
)


def _greatest() -> str:
    return "GREATEST" if connection.vendor == "postgresql" else "MAX"


def _json() -> str:
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def _values(rows: Sequence[Sequence[Any]], row_sql: str) -> tuple[str, list[Any]]:
    return ", ".join([row_sql] * len(rows)), [v for row in rows for v in row]


@transaction.atomic
def usage_ingest(*, reports: Sequence[tuple[int, Report]], now: datetime | None = None) -> None:
    """Store a batch of (node id, report) pairs; repeating any part of it changes nothing."""
    if not reports:
        return
    now = now or timezone.now()
    at = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cur:
        rows = [
            (
                node_id,
                r.boot_epoch,
                r.seq,
                connection.ops.adapt_datetimefield_value(r.sent_at),
                at,
                json.dumps(r.gpus, separators=(",", ":")),
            )
            for node_id, r in reports
        ]
        sql, params = _values(rows, f"(%s, %s, %s, %s, %s, {_json()})")
        cur.execute(
            f"INSERT INTO {UsageReport._meta.db_table} (node_id, boot_epoch, seq, sent_at, received_at, samples) "
            f"VALUES {sql} ON CONFLICT (node_id, boot_epoch, seq) DO NOTHING",
            params,
        )
        marks: dict[tuple[int, int], int] = {}
        for node_id, r in reports:
            key = (node_id, r.boot_epoch)
            marks[key] = max(marks.get(key, 0), r.seq)
        table = UsageMark._meta.db_table
        sql, params = _values([(n, e, s) for (n, e), s in marks.items()], "(%s, %s, %s)")
        cur.execute(
            f"INSERT INTO {table} (node_id, boot_epoch, seq) VALUES {sql} ON CONFLICT (node_id, boot_epoch) "
            f"DO UPDATE SET seq = {_greatest()}({table}.seq, excluded.seq)",
            params,
        )
    idle_pct = market_policy().idle_util_pct
    counters: list[tuple[int, LeaseCounters, datetime | None]] = []
    for node_id, r in reports:
        util = r.lease_util() if idle_pct else {}
        for c in r.leases:
            idle = r.sent_at if idle_pct and util.get(c.lease, 0.0) < idle_pct else None
            counters.append((node_id, c, idle))
    _save_counters(counters, now)


def lease_counters_save(*, node_id: int, counters: list[LeaseCounters], now: datetime) -> None:
    """Counters from outside a report (an exit report's final ones), with the same max-wins rule."""
    _save_counters([(node_id, c, None) for c in counters], now)


def _merge(old: tuple[LeaseCounters, datetime | None], new: tuple[LeaseCounters, datetime | None]) -> Any:
    """Two entries for one (lease, node) in one batch, combined as the SQL would combine them in turn."""
    (a, a_idle), (b, b_idle) = old, new
    newer, newer_idle = (b, b_idle) if b.samples >= a.samples else (a, a_idle)
    merged = LeaseCounters(
        lease=a.lease,
        gpu_seconds=max(a.gpu_seconds, b.gpu_seconds),
        energy_j=max(a.energy_j, b.energy_j),
        util_avg=newer.util_avg,
        util_max=max(a.util_max, b.util_max),
        mem_avg_mb=newer.mem_avg_mb,
        mem_max_mb=max(a.mem_max_mb, b.mem_max_mb),
        samples=max(a.samples, b.samples),
        log_tail=newer.log_tail,
    )
    idle = None if newer_idle is None else min(t for t in (a_idle, b_idle) if t is not None)
    return merged, idle


def _save_counters(entries: list[tuple[int, LeaseCounters, datetime | None]], now: datetime) -> None:
    if not entries:
        return
    # Only the node's own, unsettled leases (one query for the batch).
    ours = set(
        LeaseGpu.objects.filter(
            lease_id__in={c.lease for _, c, _ in entries}, gpu__node_id__in={n for n, _, _ in entries}
        )
        .exclude(lease__state=LeaseState.ENDED)
        .values_list("lease_id", "gpu__node_id")
        .distinct()
    )
    merged: dict[tuple[int, int], tuple[LeaseCounters, datetime | None]] = {}
    for node_id, c, idle in entries:
        key = (c.lease, node_id)
        if key in ours:
            merged[key] = _merge(merged[key], (c, idle)) if key in merged else (c, idle)
    if not merged:
        return
    ops = connection.ops
    at = ops.adapt_datetimefield_value(now)
    rows = [
        (
            lease,
            node,
            c.gpu_seconds,
            c.energy_j,
            c.util_avg,
            c.util_max,
            c.mem_avg_mb,
            c.mem_max_mb,
            c.samples,
            c.log_tail,
            None if idle is None else ops.adapt_datetimefield_value(idle),
            at,
        )
        for (lease, node), (c, idle) in merged.items()
    ]
    t, g = LeaseUsage._meta.db_table, _greatest()
    newer = f"excluded.samples >= {t}.samples"
    sql, params = _values(rows, "(" + ", ".join(["%s"] * len(_COUNTER_COLUMNS)) + ")")
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {t} ({', '.join(_COUNTER_COLUMNS)}) VALUES {sql} ON CONFLICT (lease_id, node_id) "
            f"DO UPDATE SET "
            f"gpu_seconds = {g}({t}.gpu_seconds, excluded.gpu_seconds), "
            f"energy_j = {g}({t}.energy_j, excluded.energy_j), "
            f"util_max = {g}({t}.util_max, excluded.util_max), "
            f"mem_max_mb = {g}({t}.mem_max_mb, excluded.mem_max_mb), "
            f"util_avg = CASE WHEN {newer} THEN excluded.util_avg ELSE {t}.util_avg END, "
            f"mem_avg_mb = CASE WHEN {newer} THEN excluded.mem_avg_mb ELSE {t}.mem_avg_mb END, "
            f"log_tail = CASE WHEN {newer} THEN excluded.log_tail ELSE {t}.log_tail END, "
            # Busy in the newest report: not idle; idle: idle since the first idle report of the spell.
            f"idle_since = CASE WHEN NOT ({newer}) THEN {t}.idle_since WHEN excluded.idle_since IS NULL "
            f"THEN NULL ELSE COALESCE({t}.idle_since, excluded.idle_since) END, "
            f"samples = {g}({t}.samples, excluded.samples), "
            f"updated_at = excluded.updated_at",
            params,
        )
