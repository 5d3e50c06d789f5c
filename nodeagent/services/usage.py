"""Usage ingestion (ARCHITECTURE.md §Money: "node+epoch+seq for usage"; docs/agent.md §Billing).

A batch of reports is written in a fixed number of statements, whatever its size:

- the reports themselves, `ON CONFLICT DO NOTHING` on (node, boot epoch, seq): a repeated report is stored once;
- the high-water mark per (node, boot epoch): the largest seq seen;
- each lease's counters on each node: every cumulative counter keeps the largest value seen (GREATEST), and the
  averages and the log tail come from the report with the most samples, so a duplicated or late report
  changes nothing and reports may arrive in any order.

Counters for a lease the node has no GPU of, or for a lease already settled, are dropped: a node acts only on
its own leases, and a settled lease's charge is final. The same holds for a lease's checkpoint time, which goes
to the lease itself (nodeagent.services.checkpoints).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from market.models import Lease, LeaseGpu, LeaseState, LeaseUsage, UsageReport
from market.selectors.policy import idle_util_pct
from nodeagent.models import UsageMark
from nodeagent.services.checkpoints import checkpoints_save
from nodeagent.services.usage_parse import LeaseCounters, Report, Samples


def _greatest() -> str:
    return "GREATEST" if connection.vendor == "postgresql" else "MAX"


# Up to this many rows, one INSERT ... VALUES (one round trip) costs less than the COPY's four (create the
# staging table if new, empty it, COPY, INSERT ... SELECT); a report from the view is 1 report, 1 mark and a
# few lease rows. Above it the COPY wins (a VALUES list of thousands of placeholders is slow to build).
# tests/nodeagent/test_usage_paths.py runs both paths on the same batch and compares the rows.
COPY_FROM_ROWS = 64


def _upsert(model: type[models.Model], columns: dict[str, list[Any]], conflict: str) -> int:
    """INSERT rows given as columns, then `conflict` (an ON CONFLICT clause): one statement either way.
    Returns the rows inserted or updated (with DO NOTHING: the rows new to the table).

    PostgreSQL gets a batch by COPY (_pg_upsert); a few rows, and SQLite (the local demo), as a VALUES list."""
    fields = [model._meta.get_field(name) for name in columns]
    rows = list(zip(*columns.values(), strict=True))
    if connection.vendor == "postgresql" and len(rows) > COPY_FROM_ROWS:
        return _pg_upsert(model, fields, rows, conflict)
    return _values_upsert(model, fields, rows, conflict)


def _values_upsert(
    model: type[models.Model], fields: list[Any], rows: list[tuple[Any, ...]], conflict: str
) -> int:
    adapt = [_adapter(f) for f in fields]
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)}) "
            f"VALUES {', '.join([one] * len(rows))} {conflict}",
            [a(v) for row in rows for a, v in zip(adapt, row, strict=True)],
        )
        return int(cur.rowcount)


def _pg_upsert(
    model: type[models.Model], fields: list[Any], rows: list[tuple[Any, ...]], conflict: str
) -> int:
    """COPY the rows into a temporary table of this connection (emptied at each commit), then one
    INSERT ... SELECT with the conflict clause: the rows travel as fast as a raw COPY does."""
    table = model._meta.db_table
    stage, cols = f"stage_{table}", ", ".join(f.column for f in fields)
    jsonb = [f.get_internal_type() == "JSONField" for f in fields]
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with connection.cursor() as cur:
        cur.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "
            f"SELECT {cols} FROM {table} WITH NO DATA"
        )
        cur.execute(f"DELETE FROM {stage}")  # from an earlier call in this same transaction
        with cur.cursor.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([dumps(v) if j else v for v, j in zip(row, jsonb, strict=True)])
        cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage} {conflict}")
        return int(cur.rowcount)


def _adapter(field: models.Field[Any, Any]) -> Any:  # any model field, whatever its value types
    kind = field.get_internal_type()
    if kind == "JSONField":
        return lambda v: json.dumps(v, separators=(",", ":"))
    if kind == "DateTimeField":
        return connection.ops.adapt_datetimefield_value
    return lambda v: v


@transaction.atomic
def usage_ingest(*, reports: Sequence[tuple[int, Report]], now: datetime | None = None) -> int:
    """Store a batch of (node id, report) pairs; repeating any part of it changes nothing. Returns how many
    of the reports were new (the others had been stored before: duplicates)."""
    if not reports:
        return 0
    now = now or timezone.now()
    fresh = _upsert(
        UsageReport,
        {
            "node_id": [node_id for node_id, _ in reports],
            "boot_epoch": [r.boot_epoch for _, r in reports],
            "seq": [r.seq for _, r in reports],
            "sent_at": [r.sent_at for _, r in reports],
            "received_at": [now] * len(reports),
            "samples": [r.gpus for _, r in reports],
        },
        "ON CONFLICT (node_id, boot_epoch, seq) DO NOTHING",
    )
    marks: dict[tuple[int, int], int] = {}
    for node_id, r in reports:
        key = (node_id, r.boot_epoch)
        marks[key] = max(marks.get(key, 0), r.seq)
    table = UsageMark._meta.db_table
    _upsert(
        UsageMark,
        {
            "node_id": [n for n, _ in marks],
            "boot_epoch": [e for _, e in marks],
            "seq": list(marks.values()),
        },
        f"ON CONFLICT (node_id, boot_epoch) DO UPDATE SET seq = {_greatest()}({table}.seq, excluded.seq)",
    )
    idle_pct = idle_util_pct()
    counters: list[tuple[int, LeaseCounters, datetime | None]] = []
    for node_id, r in reports:
        util = r.lease_util() if idle_pct else {}
        for c in r.leases:
            idle = r.sent_at if idle_pct and util.get(c.lease, 0.0) < idle_pct else None
            counters.append((node_id, c, idle))
    _save_counters(counters, now)
    return fresh


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
        checkpoint_at=max((t for t in (a.checkpoint_at, b.checkpoint_at) if t is not None), default=None),
    )
    idle = None if newer_idle is None else min(t for t in (a_idle, b_idle) if t is not None)
    return merged, idle


_COUNTERS = (
    "gpu_seconds",
    "energy_j",
    "util_avg",
    "util_max",
    "mem_avg_mb",
    "mem_max_mb",
    "samples",
    "log_tail",
)


def _own_leases(pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The (lease, node) pairs whose lease is unsettled and has a GPU on the node. A lease's own `node` is
    the node of its first GPU, which answers most pairs from the lease rows alone; only the other nodes of a
    gang spanning several are looked up through its GPUs. Plain SQL: this runs for every agent report, and
    building the ORM's query cost more than running it (bench/usage.py)."""
    leases = sorted({lease for lease, _ in pairs})
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT id, node_id FROM {Lease._meta.db_table} "
            f"WHERE id IN ({', '.join(['%s'] * len(leases))}) AND state <> %s",
            [*leases, LeaseState.ENDED],
        )
        live = dict(cur.fetchall())
    ours = {(lease, node) for lease, node in pairs if live.get(lease) == node}
    others = {(lease, node) for lease, node in pairs if lease in live and live[lease] != node}
    if others:
        ours |= others & set(
            LeaseGpu.objects.filter(
                lease_id__in={lease for lease, _ in others}, gpu__node_id__in={node for _, node in others}
            ).values_list("lease_id", "gpu__node_id")
        )
    return ours


def _save_counters(entries: list[tuple[int, LeaseCounters, datetime | None]], now: datetime) -> None:
    if not entries:
        return
    # Only the node's own, unsettled leases (one query for the batch).
    ours = _own_leases({(c.lease, n) for n, c, _ in entries})
    merged: dict[tuple[int, int], tuple[LeaseCounters, datetime | None]] = {}
    for node_id, c, idle in entries:
        key = (c.lease, node_id)
        if key in ours:
            merged[key] = _merge(merged[key], (c, idle)) if key in merged else (c, idle)
    if not merged:
        return
    checkpoints_save([(lease, c.checkpoint_at) for (lease, _), (c, _) in merged.items()], now=now)
    keys, values = list(merged), list(merged.values())
    t, g = LeaseUsage._meta.db_table, _greatest()
    newer = f"excluded.samples >= {t}.samples"
    _upsert(
        LeaseUsage,
        {
            "lease_id": [lease for lease, _ in keys],
            "node_id": [node for _, node in keys],
            **{name: [getattr(c, name) for c, _ in values] for name in _COUNTERS},
            "idle_since": [idle for _, idle in values],
            "updated_at": [now] * len(keys),
        },
        "ON CONFLICT (lease_id, node_id) DO UPDATE SET "
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
        "updated_at = excluded.updated_at",
    )


# proto adapter: replaced by the usage branch
def report_ingest(
    *,
    node_id: int,
    boot_epoch: int,
    seq: int,
    sent_at: datetime,
    samples: Samples | None,
    leases: list[LeaseCounters],
    now: datetime | None = None,
) -> bool:
    """A protocol 2 report's samples and counters, stored as today's usage report (one GPU sample per GPU
    and tick). True when the report was new."""
    gpus: list[dict[str, Any]] = []
    if samples is not None:
        newest = len(samples.t) - 1
        for i, t in enumerate(samples.t):
            at = datetime.fromtimestamp(t, UTC).isoformat()
            for j, uuid in enumerate(samples.gpus):
                procs = [
                    {"pid": p["pid"], "used_mb": p["used_mb"], "lease": p.get("lease")}
                    for p in samples.processes
                    if i == newest and p["gpu"] == uuid
                ]
                gpus.append(
                    {
                        "uuid": uuid,
                        "at": at,
                        "healthy": True,
                        "util_pct": samples.util[i][j],
                        "mem_used_mb": samples.mem_mb[i][j],
                        "power_w": samples.power_w[i][j],
                        "energy_j": samples.energy_j[i][j],
                        "processes": procs,
                    }
                )
    report = Report(boot_epoch=boot_epoch, seq=seq, sent_at=sent_at, gpus=gpus, leases=leases)
    return usage_ingest(reports=[(node_id, report)], now=now) > 0
