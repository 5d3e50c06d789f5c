"""Usage storage upkeep (docs/agent.md §Usage storage), run by the hourly retention task: partitions made
ahead, 10-s days downsampled to 1-minute rows and dropped whole, 1-minute days past the policy's retention
dropped whole. No DELETE of sample rows on PostgreSQL; SQLite (`make run`) keeps plain tables and deletes.

Each day of UsageSample (10-s ticks) takes samples until the end of the next day (RAW_KEEP_DAYS), so the job
pages read every tick for at least a day; then, a few minutes past, it is closed: its ticks become one
UsageMinute row per node, column order and hour (per GPU and minute: mean and highest utilisation, mean and
highest memory, energy used), a few hundred nodes a transaction, and then the day is dropped. Billing never reads
either: LeaseUsage holds what a lease is charged from, kept as samples arrive."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from market.models import UsageMinute, UsageSample
from market.models.usage import DAYS_AHEAD, RAW_KEEP_DAYS
from market.models.usage_blob import Minutes, pack_minutes, unpack
from market.selectors.policy import market_policy
from market.selectors.usage_samples import day_start

log = logging.getLogger(__name__)

# Past the end of a day's intake, before it is downsampled: web processes' clocks may trail the worker's.
CLOSE_AFTER = timedelta(minutes=10)
_LOCK = 36_002  # pg_advisory_xact_lock key: one upkeep at a time


@dataclass(frozen=True)
class StorageStats:
    days_downsampled: int
    minute_rows: int
    minute_days_dropped: int


def _name(table: str, day: datetime) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _partitions(table: str) -> dict[datetime, str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [table],
        )
        names = [r[0] for r in cur.fetchall()]
    prefix = f"{table}_p"
    return {
        datetime.strptime(n[len(prefix) :], "%Y%m%d").replace(tzinfo=UTC): n
        for n in names
        if n.startswith(prefix)
    }


def partition_ensure(table: str, day: datetime) -> None:
    """The day's partition of `table`, made if missing; rows of that day that went to the DEFAULT partition
    meanwhile are moved into it first (PostgreSQL refuses to attach over them). Call under the lock."""
    if day in _partitions(table):
        return
    name, lo, hi = _name(table, day), day, day + timedelta(days=1)
    with connection.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cur.execute(
            f"WITH moved AS (DELETE FROM {table}_default WHERE at >= %s AND at < %s RETURNING *) "
            f"INSERT INTO {name} SELECT * FROM moved",
            [lo, hi],
        )
        cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [lo, hi])


def usage_storage_maintain(*, now: datetime | None = None) -> StorageStats:
    """One pass of the upkeep; safe to repeat and to run beside the ingest."""
    now = now or timezone.now()
    today = day_start(now)
    closed_before = day_start(now - CLOSE_AFTER) - timedelta(days=RAW_KEEP_DAYS)  # days before it are closed
    minute_cutoff = today - timedelta(days=market_policy().retention_days)
    pg = connection.vendor == "postgresql"
    sample_t, minute_t = UsageSample._meta.db_table, UsageMinute._meta.db_table
    if pg:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
            for table in (sample_t, minute_t):
                cur.execute(f"SELECT DISTINCT date_trunc('day', at AT TIME ZONE 'UTC') FROM {table}_default")
                strays = [d.replace(tzinfo=UTC) for (d,) in cur.fetchall()]
                ahead = [today + timedelta(days=d) for d in range(-RAW_KEEP_DAYS, DAYS_AHEAD + 1)]
                for day in sorted(set(strays) | set(ahead)):
                    partition_ensure(table, day)
        days = sorted(d for d in _partitions(sample_t) if d < closed_before)
    else:
        days = []
        closed = UsageSample.objects.filter(at__lt=closed_before).order_by("at").values_list("at", flat=True)
        first = closed.first()
        while first is not None:  # the days that hold rows, one read each
            days.append(day_start(first))
            first = closed.filter(at__gte=days[-1] + timedelta(days=1)).first()
    rows = sum(_downsample_day(day, pg) for day in days)
    dropped = _drop_minutes(minute_cutoff, pg)
    if days or dropped:
        log.info(
            "usage storage: %d day(s) downsampled into %d minute rows, %d minute day(s) dropped",
            len(days),
            rows,
            dropped,
            extra={"days_downsampled": len(days), "minute_rows": rows, "minute_days_dropped": dropped},
        )
    return StorageStats(days_downsampled=len(days), minute_rows=rows, minute_days_dropped=dropped)


def _drop_minutes(cutoff: datetime, pg: bool) -> int:
    if not pg:
        return UsageMinute.objects.filter(at__lt=cutoff).delete()[0]
    dropped = 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
        for day, name in _partitions(UsageMinute._meta.db_table).items():
            if day < cutoff:
                cur.execute(f"DROP TABLE {name}")
                dropped += 1
    return dropped


# Nodes downsampled per transaction: a 12,500-node day is tens of millions of rows, read in short steps (each
# idempotent: a minute row's key is its node, hour and column order) instead of one transaction of hours.
NODES_PER_STEP = 500


def _downsample_day(day: datetime, pg: bool) -> int:
    """One closed day of 10-s rows as 1-minute rows, NODES_PER_STEP nodes a transaction, then the day dropped.
    Stopped half way, the next pass does it again: the minutes already written are kept as they are."""
    sample_t = UsageSample._meta.db_table
    if pg:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
            if day not in _partitions(sample_t):
                return 0  # another pass did it
            partition_ensure(UsageMinute._meta.db_table, day)
    rows = UsageSample.objects.filter(
        at__gte=day, at__lt=day + timedelta(days=1), ticks__gt=0, columns__isnull=False
    )
    nodes = sorted(set(rows.values_list("node_id", flat=True).distinct()))
    written = 0
    for i in range(0, len(nodes), NODES_PER_STEP):
        step = nodes[i : i + NODES_PER_STEP]
        with transaction.atomic():
            written += _downsample_nodes(rows.filter(node_id__gte=step[0], node_id__lte=step[-1]), day)
    with transaction.atomic():
        if pg:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
                if day in _partitions(sample_t):
                    cur.execute(f"DROP TABLE {_name(sample_t, day)}")
        else:
            UsageSample.objects.filter(at__gte=day, at__lt=day + timedelta(days=1)).delete()
    return written


def _downsample_nodes(rows: Any, day: datetime) -> int:
    minutes: list[UsageMinute] = []
    group: list[tuple[datetime, bytes]] = []
    key: tuple[int, int] | None = None
    ordered = rows.order_by("node_id", "columns_id", "at").values_list("node_id", "columns_id", "at", "data")
    for node_id, columns_id, at, data in ordered.iterator(chunk_size=2000):
        if (node_id, columns_id) != key and group and key is not None:
            minutes += _aggregate(key, group, day)
            group = []
        key = (node_id, columns_id)
        group.append((at, bytes(data)))
    if group and key is not None:
        minutes += _aggregate(key, group, day)
    UsageMinute.objects.bulk_create(minutes, batch_size=2000, ignore_conflicts=True)
    return len(minutes)


def _aggregate(key: tuple[int, int], group: list[tuple[datetime, bytes]], day: datetime) -> list[UsageMinute]:
    """One node's and column order's ticks of the day as one UsageMinute row per hour. A tick's energy rise
    is from the tick before it (the day's first tick: none; a counter that fell counts from zero)."""
    node_id, columns_id = key
    times: list[Any] = []
    util, mem, energy = [], [], []
    base = day.timestamp()
    for at, data in group:
        t = unpack(data)
        times.append(at.timestamp() - base + t.t_ms / 1000)
        util.append(t.util)
        mem.append(t.mem_mb)
        energy.append(t.energy_j)
    secs = np.concatenate(times)
    u, m, e = np.vstack(util), np.vstack(mem), np.vstack(energy)
    before = np.vstack((e[:1], e[:-1]))
    rise = np.where(e >= before, e - before, e)
    minute = np.floor(secs / 60).astype(np.int64)
    minute = np.clip(minute, 0, 24 * 60 - 1)  # a report whose ticks ran past midnight: its last minute
    by_hour: dict[int, list[int]] = defaultdict(list)
    edges = np.flatnonzero(np.diff(minute)) + 1
    starts = np.concatenate(([0], edges))
    for s in starts:
        by_hour[int(minute[s]) // 60].append(int(s))
    out = []
    for hour, firsts in sorted(by_hour.items()):
        idx = [int(np.searchsorted(starts, s)) for s in firsts]
        ends = [int(starts[i + 1]) if i + 1 < len(starts) else len(minute) for i in idx]
        spans = list(zip(firsts, ends, strict=True))
        agg = Minutes(
            minute=np.array([minute[a] - hour * 60 for a, _ in spans], dtype=np.uint16),
            samples=np.array([b - a for a, b in spans], dtype=np.uint16),
            util_avg=np.array([u[a:b].mean(axis=0) for a, b in spans]),
            util_max=np.array([u[a:b].max(axis=0) for a, b in spans]),
            mem_avg_mb=np.array([m[a:b].mean(axis=0) for a, b in spans]),
            mem_max_mb=np.array([m[a:b].max(axis=0) for a, b in spans]),
            energy_j=np.array([rise[a:b].sum(axis=0) for a, b in spans]),
        )
        out.append(
            UsageMinute(
                node_id=node_id,
                columns_id=columns_id,
                at=day + timedelta(hours=hour),
                data=pack_minutes(agg),
            )
        )
    return out
