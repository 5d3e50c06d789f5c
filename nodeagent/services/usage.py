"""Usage ingestion (ARCHITECTURE.md §Money: "node+epoch+seq for usage"; docs/agent.md §Billing, §Usage storage).

A report (protocol 2's `POST report`, or protocol 1's one-tick `POST usage`) is written in a fixed number of
statements, whatever its size:

- its samples, packed into one row (market.models.usage_blob) of the day-partitioned UsageSample table, once
  per (node, boot epoch, seq): a repeated report is stored once; the high-water mark per (node, boot epoch)
  (the largest seq seen) and the node's column order ride in the same statement on PostgreSQL;
- each lease's counters on each node: every cumulative counter keeps the largest value seen (GREATEST), and the
  averages and the log tail come from the report with the most samples, so a duplicated or late report
  changes nothing and reports may arrive in any order; the idle spell from the per-tick lease and
  utilisation columns.

Counters for a lease the node has no GPU of, or for a lease already settled, are dropped: a node acts only on
its own leases, and a settled lease's charge is final. The same holds for a lease's checkpoint time, which goes
to the lease itself (nodeagent.services.checkpoints).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from django.db import connection, models, transaction
from django.utils import timezone
from psycopg.types.numeric import Int2, Int8

from inventory.models import Gpu
from market.models import Lease, LeaseGpu, LeaseState, LeaseUsage, MarketPolicy, UsageColumns, UsageSample
from market.models.usage_blob import pack
from market.selectors.policy import idle_util_pct
from market.selectors.usage_samples import samples_window
from nodeagent.models import UsageMark
from nodeagent.services.checkpoints import checkpoints_save
from nodeagent.services.usage_parse import LeaseCounters, Report, Samples, samples_from_report


def _greatest() -> str:
    return "GREATEST" if connection.vendor == "postgresql" else "MAX"


# Up to this many rows, one INSERT ... VALUES (one round trip) costs less than the COPY's four (create the
# staging table if new, empty it, COPY, INSERT ... SELECT); a report from the view is 1 report, 1 mark and a
# few lease rows. Above it the COPY wins (a VALUES list of thousands of placeholders is slow to build).
# tests/nodeagent/test_usage_paths.py runs both paths on the same batch and compares the rows.
COPY_FROM_ROWS = 64


def _upsert(
    model: type[models.Model], columns: dict[str, list[Any]], conflict: str, params: Sequence[Any] = ()
) -> int:
    """INSERT rows given as columns, then `conflict` (an ON CONFLICT clause): one statement either way.
    Returns the rows inserted or updated (with DO NOTHING: the rows new to the table).

    PostgreSQL gets a batch by COPY (_pg_upsert); a few rows, and SQLite (the local demo), as a VALUES list."""
    fields = [model._meta.get_field(name) for name in columns]
    rows = list(zip(*columns.values(), strict=True))
    if connection.vendor == "postgresql" and len(rows) > COPY_FROM_ROWS:
        return _pg_upsert(model, fields, rows, conflict, params)
    return _values_upsert(model, fields, rows, conflict, params)


def _values_upsert(
    model: type[models.Model],
    fields: list[Any],
    rows: list[tuple[Any, ...]],
    conflict: str,
    params: Sequence[Any] = (),
) -> int:
    adapt = [_adapter(f) for f in fields]
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)}) "
            f"VALUES {', '.join([one] * len(rows))} {conflict}",
            [*(a(v) for row in rows for a, v in zip(adapt, row, strict=True)), *params],
        )
        return int(cur.rowcount)


def _pg_upsert(
    model: type[models.Model],
    fields: list[Any],
    rows: list[tuple[Any, ...]],
    conflict: str,
    params: Sequence[Any] = (),
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
        cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage} {conflict}", list(params))
        return int(cur.rowcount)


def _adapter(field: models.Field[Any, Any]) -> Any:  # any model field, whatever its value types
    kind = field.get_internal_type()
    if kind == "JSONField":
        return lambda v: json.dumps(v, separators=(",", ":"))
    if kind == "DateTimeField":
        return connection.ops.adapt_datetimefield_value
    return lambda v: v


# One entry of the counters' upsert: (node, the lease's counters, idle since (None: busy), whether this
# report saw the lease busy before its idle spell began, so the spell's start replaces any older one).
Entry = tuple[int, LeaseCounters, datetime | None, bool]


# No savepoint: inside the report view's own transaction (protocol 2 writes acks, events and usage together)
# a savepoint would cost two more round trips, and the report is all or nothing with the rest anyway.
@transaction.atomic(savepoint=False)
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
    """Store one report's samples and counters (docs/agent.md §Protocol `POST report`); repeating it changes
    nothing. True when the report was new (not stored before)."""
    now = now or timezone.now()
    fresh, idle_pct = _store(node_id, boot_epoch, seq, samples, now)
    _save_counters(_entries(node_id, samples, leases, idle_pct), now)
    return fresh


@transaction.atomic
def usage_ingest(*, reports: Sequence[tuple[int, Report]], now: datetime | None = None) -> int:
    """Protocol 1: store a batch of (node id, report) pairs, each converted to protocol 2's one-tick columns;
    repeating any part of it changes nothing. Returns how many of the reports were new (the others had been
    stored before: duplicates)."""
    if not reports:
        return 0
    now = now or timezone.now()
    idle_pct = idle_util_pct()
    fresh, entries = 0, []
    for node_id, r in reports:
        samples = samples_from_report(r)
        fresh += _store(node_id, r.boot_epoch, r.seq, samples, now)[0]
        entries += _entries(node_id, samples, r.leases, idle_pct)
    _save_counters(entries, now)
    return fresh


def _entries(
    node_id: int, samples: Samples | None, leases: list[LeaseCounters], idle_pct: int
) -> list[Entry]:
    """Each lease's counters with its idle spell (the idle policy, docs/policy.md): idle since the first tick
    of the run of ticks at the report's end in which the lease stayed under the threshold; busy (None) when it
    was over it at the last tick. A report without samples says nothing of the spell: kept as it stands."""
    if not idle_pct or samples is None:
        return (
            [(node_id, c, None, False) for c in leases]
            if idle_pct == 0
            else [(node_id, c, _KEEP, False) for c in leases]
        )
    util = samples.lease_util([c.lease for c in leases])
    out: list[Entry] = []
    for j, c in enumerate(leases):
        idle = util[:, j] < idle_pct
        if not idle[-1]:
            out.append((node_id, c, None, False))
            continue
        busy = np.flatnonzero(~idle)
        first = int(busy[-1]) + 1 if len(busy) else 0
        out.append((node_id, c, _when(samples.t[first]), first > 0))
    return out


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(float(epoch), tz=UTC)


# A report without samples: the lease's idle spell stays as it stands (a sentinel time, never stored).
_KEEP = datetime(1970, 1, 1, tzinfo=UTC)


def _store(
    node_id: int, boot_epoch: int, seq: int, samples: Samples | None, now: datetime
) -> tuple[bool, int]:
    """The report's row and the high-water mark: (whether the report was new, the idle policy's threshold,
    read in the same statement on PostgreSQL). Samples are stored when their
    first tick falls in a day whose partition is still open (market.selectors.usage_samples.samples_window):
    older ones were downsampled already, and a clock far ahead would make days nobody reads; the counters
    count either way. A report stored without samples keeps a row with no ticks (at the server's time), so a
    repeat of it is still known."""
    at, ticks, columns, data = now, 0, None, b""
    if samples is not None:
        first = _when(samples.t[0])
        oldest, newest = samples_window(now)
        if oldest <= first <= newest:
            at, ticks, columns = first, samples.ticks, ",".join(samples.gpus)
            data = pack(
                t_ms=np.rint((samples.t - samples.t[0]) * 1000).astype(np.uint32),
                util=samples.util,
                mem_mb=samples.mem_mb,
                power_w=samples.power_w,
                energy_j=samples.energy_j,
                lease=samples.lease,
                foreign=samples.foreign,
            )
    if connection.vendor == "postgresql":
        return _pg_store(node_id, boot_epoch, seq, at, ticks, columns, data, samples_window(now))
    _upsert(
        UsageMark,
        {"node_id": [node_id], "boot_epoch": [boot_epoch], "seq": [seq]},
        f"ON CONFLICT (node_id, boot_epoch) DO UPDATE SET seq = MAX({UsageMark._meta.db_table}.seq, excluded.seq)",
    )
    if UsageSample.objects.filter(node_id=node_id, boot_epoch=boot_epoch, seq=seq).exists():
        return False, idle_util_pct()
    columns_id = (
        None if columns is None else UsageColumns.objects.get_or_create(node_id=node_id, uuids=columns)[0].pk
    )
    UsageSample.objects.create(
        node_id=node_id, boot_epoch=boot_epoch, seq=seq, at=at, ticks=ticks, columns_id=columns_id, data=data
    )
    return True, idle_util_pct()


@contextmanager
def _prepared() -> Iterator[Any]:
    """A cursor of the connection's own psycopg connection (in Django's transaction): its parameters travel
    apart from the SQL (server-side binding; the packed samples as bytes, not escaped into the text) and
    `prepare=True` parses and plans a statement once per connection: the ingest runs the same two statements
    for every report, and building them was most of its cost (bench/usage.py)."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with psycopg.Cursor(raw) as cur:
        yield cur


def _pg_store(
    node_id: int,
    boot_epoch: int,
    seq: int,
    at: datetime,
    ticks: int,
    columns: str | None,
    data: bytes,
    window: tuple[datetime, datetime],
) -> tuple[bool, int]:
    """One statement: the mark, the node's column order (found, or added the first time), the row unless a
    row of this (node, boot epoch, seq) exists in any day (the key holds `at` too, the partition key). Two
    reports racing to add the same new column order: one's INSERT finds the other's row and adds nothing, and
    its samples are kept without columns (`columns_id` NULL: unreadable, never wrong)."""
    mark, cols, sample = UsageMark._meta.db_table, UsageColumns._meta.db_table, UsageSample._meta.db_table
    policy = MarketPolicy._meta.db_table
    # Rows of this report sit in the window's days, or at `now` when it kept none (now is in the window).
    lo, hi = window
    default_idle = int(MarketPolicy._meta.get_field("idle_util_pct").default)
    with _prepared() as cur:
        cur.execute(
            f"WITH mark AS (INSERT INTO {mark} (node_id, boot_epoch, seq) VALUES (%(n)s, %(e)s, %(s)s) "
            f"ON CONFLICT (node_id, boot_epoch) DO UPDATE SET seq = GREATEST({mark}.seq, excluded.seq)), "
            f"old AS (SELECT id FROM {cols} WHERE node_id = %(n)s AND uuids = %(u)s), "
            f"new AS (INSERT INTO {cols} (node_id, uuids) SELECT %(n)s, %(u)s "
            "WHERE %(u)s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM old) ON CONFLICT DO NOTHING RETURNING id), "
            f"ins AS (INSERT INTO {sample} (node_id, boot_epoch, seq, at, ticks, columns_id, data) "
            "SELECT %(n)s, %(e)s, %(s)s, %(at)s, %(k)s, COALESCE((SELECT id FROM old), (SELECT id FROM new)), %(d)s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {sample} WHERE node_id = %(n)s AND boot_epoch = %(e)s AND seq = %(s)s "
            # Only the days that take samples (and the DEFAULT partition): pruned at run time.
            "AND at >= %(lo)s AND at <= %(hi)s) "
            "ON CONFLICT DO NOTHING RETURNING 1) "
            f"SELECT (SELECT count(*) FROM ins), (SELECT idle_util_pct FROM {policy} WHERE singleton = 1)",
            {
                "n": Int8(node_id),
                "e": Int8(boot_epoch),
                "s": Int8(seq),
                "at": at,
                "k": Int2(ticks),
                "u": columns,
                "d": data,
                "lo": lo,
                "hi": hi,
            },
            prepare=True,
        )
        row = cur.fetchone()
        assert row is not None  # a SELECT of two subqueries: always one row
        fresh, idle_pct = row
    return bool(fresh), default_idle if idle_pct is None else int(idle_pct)


def lease_counters_save(*, node_id: int, counters: list[LeaseCounters], now: datetime) -> None:
    """Counters from outside a report (an exit report's final ones), with the same max-wins rule."""
    _save_counters([(node_id, c, _KEEP, False) for c in counters], now)


def _merge(
    old: tuple[LeaseCounters, datetime | None, bool], new: tuple[LeaseCounters, datetime | None, bool]
) -> Any:
    """Two entries for one (lease, node) in one batch, combined as the SQL would combine them in turn."""
    (a, a_idle, a_reset), (b, b_idle, b_reset) = old, new
    newer, newer_idle, newer_reset = (b, b_idle, b_reset) if b.samples >= a.samples else (a, a_idle, a_reset)
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
    if newer_idle is None or newer_idle == _KEEP or newer_reset:
        return merged, newer_idle, newer_reset
    return merged, min(t for t in (a_idle, b_idle) if t is not None and t != _KEEP), False


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


def _upsert_counters(
    merged: dict[tuple[int, int], tuple[LeaseCounters, datetime | None, bool]], now: datetime
) -> None:
    keys, values = list(merged), list(merged.values())
    _upsert(
        LeaseUsage,
        {
            "lease_id": [lease for lease, _ in keys],
            "node_id": [node for _, node in keys],
            **{name: [getattr(c, name) for c, _, _ in values] for name in _COUNTERS},
            "idle_since": [idle for _, idle, _ in values],
            "updated_at": [now] * len(keys),
        },
        _conflict(),
        [connection.ops.adapt_datetimefield_value(_KEEP)],
    )


# The columns of the one-statement upsert, with their types (a VALUES list's NULLs need one).
_PG_COLUMNS = (
    ("lease_id", "bigint"),
    ("node_id", "bigint"),
    ("gpu_seconds", "float8"),
    ("energy_j", "float8"),
    ("util_avg", "float8"),
    ("util_max", "float8"),
    ("mem_avg_mb", "float8"),
    ("mem_max_mb", "float8"),
    ("samples", "bigint"),
    ("log_tail", "text"),
    ("idle_since", "timestamptz"),
    ("updated_at", "timestamptz"),
)


def _pg_counters(
    merged: dict[tuple[int, int], tuple[LeaseCounters, datetime | None, bool]], now: datetime
) -> set[tuple[int, int]]:
    """The upsert of a report's few counters, keeping only the node's own, unsettled leases (the same rule as
    _own_leases, in SQL: the lease's own node, or a GPU of it on the node); the pairs kept."""
    t, lease_t = LeaseUsage._meta.db_table, Lease._meta.db_table
    gpu_t, inv_t = LeaseGpu._meta.db_table, Gpu._meta.db_table
    one = "(" + ", ".join(f"%s::{kind}" for _, kind in _PG_COLUMNS) + ")"
    names = ", ".join(name for name, _ in _PG_COLUMNS)
    params: list[Any] = []
    for (lease, node), (c, idle, _) in merged.items():
        params += [lease, node, *(getattr(c, name) for name in _COUNTERS), idle, now]
    with _prepared() as cur:
        cur.execute(
            f"INSERT INTO {t} ({names}) SELECT v.* FROM (VALUES {', '.join([one] * len(merged))}) AS v({names}) "
            f"JOIN {lease_t} l ON l.id = v.lease_id AND l.state <> %s "
            f"WHERE l.node_id = v.node_id OR EXISTS (SELECT 1 FROM {gpu_t} lg JOIN {inv_t} g ON g.id = lg.gpu_id "
            "WHERE lg.lease_id = v.lease_id AND g.node_id = v.node_id) "
            f"{_conflict()} RETURNING lease_id, node_id",
            [*params, str(LeaseState.ENDED), _KEEP],
            prepare=True,
        )
        return {(int(a), int(b)) for a, b in cur.fetchall()}


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


def _conflict() -> str:
    """What an upsert of counters does to a stored row: every cumulative counter keeps the larger value, the
    averages, the log tail and the idle spell come from the report with more samples. Its one parameter is
    the _KEEP sentinel."""
    t, g = LeaseUsage._meta.db_table, _greatest()
    newer = f"excluded.samples >= {t}.samples"
    return (
        "ON CONFLICT (lease_id, node_id) DO UPDATE SET "
        f"gpu_seconds = {g}({t}.gpu_seconds, excluded.gpu_seconds), "
        f"energy_j = {g}({t}.energy_j, excluded.energy_j), "
        f"util_max = {g}({t}.util_max, excluded.util_max), "
        f"mem_max_mb = {g}({t}.mem_max_mb, excluded.mem_max_mb), "
        f"util_avg = CASE WHEN {newer} THEN excluded.util_avg ELSE {t}.util_avg END, "
        f"mem_avg_mb = CASE WHEN {newer} THEN excluded.mem_avg_mb ELSE {t}.mem_avg_mb END, "
        f"log_tail = CASE WHEN {newer} THEN excluded.log_tail ELSE {t}.log_tail END, "
        # Busy in the newest report: not idle; idle: idle since the first idle report of the spell; a report
        # without samples (the sentinel _KEEP): as it stands.
        f"idle_since = CASE WHEN NOT ({newer}) OR excluded.idle_since = %s THEN {t}.idle_since "
        f"WHEN excluded.idle_since IS NULL THEN NULL ELSE COALESCE({t}.idle_since, excluded.idle_since) END, "
        f"samples = {g}({t}.samples, excluded.samples), "
        "updated_at = excluded.updated_at"
    )


def _save_counters(entries: list[Entry], now: datetime) -> None:
    if not entries:
        return
    merged: dict[tuple[int, int], tuple[LeaseCounters, datetime | None, bool]] = {}
    for node_id, c, idle, reset in entries:
        key = (c.lease, node_id)
        merged[key] = _merge(merged[key], (c, idle, reset)) if key in merged else (c, idle, reset)
    if connection.vendor == "postgresql" and len(merged) <= COPY_FROM_ROWS:
        # A report's few leases: the node's own, unsettled leases picked and upserted in one statement.
        ours = _pg_counters(merged, now)
    else:
        # A batch, or SQLite: the node's own, unsettled leases first (one query for the batch), then the upsert.
        ours = _own_leases(set(merged))
        if ours:
            _upsert_counters({k: v for k, v in merged.items() if k in ours}, now)
    merged = {k: v for k, v in merged.items() if k in ours}
    if not merged:
        return
    checkpoints_save([(lease, c.checkpoint_at) for (lease, _), (c, _, _) in merged.items()], now=now)
    # A spell that began inside the newest report (busy at an earlier tick) starts there, whatever came before.
    for (lease, node), (c, idle, reset) in merged.items():
        if reset:
            LeaseUsage.objects.filter(lease_id=lease, node_id=node, samples__lte=c.samples).update(
                idle_since=idle
            )
    # A row first written from a report without samples holds the sentinel: no spell known yet.
    kept = [(lease, node) for (lease, node), (_, idle, _) in merged.items() if idle == _KEEP]
    if kept:
        LeaseUsage.objects.filter(idle_since=_KEEP, lease_id__in={lease for lease, _ in kept}).update(
            idle_since=None
        )
