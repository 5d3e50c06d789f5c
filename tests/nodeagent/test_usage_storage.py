"""The usage samples' upkeep (market.services.usage_storage, docs/agent.md §Usage storage): days made ahead,
a day that reached the DEFAULT partition given its own, a closed 10-s day turned into 1-minute rows and
dropped whole, 1-minute days past the retention period dropped whole; the job's chart reads on through it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from market.models import Lease, UsageMinute, UsageSample
from market.models.usage_blob import unpack_minutes
from market.selectors.policy import market_policy
from market.selectors.usage import lease_usage_series
from market.selectors.usage_samples import day_start
from market.services.usage_storage import usage_storage_maintain
from nodeagent.services.usage import report_ingest
from nodeagent.services.usage_parse import parse_samples

pytestmark = pytest.mark.django_db


def _partitions(table: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass ORDER BY 1",
            [table],
        )
        return [r[0] for r in cur.fetchall()]


def _report(lease: Lease, uuids: list[str], seq: int, start: float, ticks: int = 6) -> dict[str, Any]:
    """Ticks every 10 s from `start`: the lease's GPUs at 80 then 100 % alternately, 300 W (3,000 J a tick)."""
    t = [start + 10 * k for k in range(ticks)]
    k0 = (seq - 1) * ticks
    return {
        "gpus": uuids,
        "t": t,
        "util": [[80 if (k0 + k) % 2 else 100] * len(uuids) for k in range(ticks)],
        "mem_mb": [[30_000] * len(uuids)] * ticks,
        "power_w": [[300.0] * len(uuids)] * ticks,
        "energy_j": [[1e6 + 3000.0 * (k0 + k)] * len(uuids) for k in range(ticks)],
        "lease": [[lease.pk] * len(uuids)] * ticks,
        "foreign": [[0] * len(uuids)] * ticks,
    }


def test_a_closed_day_becomes_minute_rows_and_goes_whole(running):
    _, agent, _, lease = running
    uuids = [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu").order_by("gpu__index")]
    day = day_start(timezone.now()) - timedelta(days=5)  # older than any partition the migration made
    start = day + timedelta(hours=1)
    Lease.objects.filter(pk=lease.pk).update(started_at=start, running_at=start)
    lease.refresh_from_db()
    for seq in range(1, 21):  # 20 reports of 6 ticks: 20 minutes
        body = _report(lease, uuids, seq, start.timestamp() + 60 * (seq - 1))
        assert report_ingest(
            node_id=agent.node.pk, boot_epoch=1, seq=seq, sent_at=start, samples=parse_samples(body), leases=[],
            now=start + timedelta(minutes=seq),
        )  # fmt: skip
    name = f"market_usagesample_p{day:%Y%m%d}"
    assert name not in _partitions("market_usagesample")  # they went to the DEFAULT partition
    before = lease_usage_series(lease=lease, points=1000)[agent.node.name]
    assert len(before) == 120 and before[-1].energy_j == pytest.approx(2 * 3000 * 119)

    stats = usage_storage_maintain()
    assert stats.days_downsampled >= 1 and stats.minute_rows == 1  # one node, one column order, one hour
    assert name not in _partitions("market_usagesample")  # made (rows moved out of DEFAULT), then dropped
    assert not UsageSample.objects.filter(at__lt=day + timedelta(days=1)).exists()
    today = day_start(timezone.now())
    for d in range(0, 8):  # made ahead
        assert f"market_usagesample_p{today + timedelta(days=d):%Y%m%d}" in _partitions("market_usagesample")
    row = UsageMinute.objects.get()
    assert row.at == start
    m = unpack_minutes(row.data)
    assert m.minute.tolist() == list(range(20)) and m.samples.tolist() == [6] * 20
    assert m.util_avg[:, 0].tolist() == [90.0] * 20 and m.util_max[:, 0].tolist() == [100.0] * 20
    assert m.mem_max_mb[0].tolist() == [30_000.0, 30_000.0]
    assert m.energy_j[0, 0] == 5 * 3000 and m.energy_j[1, 0] == 6 * 3000  # the day's first tick has no rise
    # The chart reads the minutes now: a point a minute, the same energy in all.
    after = lease_usage_series(lease=lease, points=1000)[agent.node.name]
    assert [p.at for p in after] == [start + timedelta(minutes=k) for k in range(20)]
    assert after[-1].energy_j == pytest.approx(before[-1].energy_j)
    assert {p.mem_used_mb for p in after} == {60_000.0}

    assert usage_storage_maintain().days_downsampled == 0  # repeating it does nothing
    later = day + timedelta(days=market_policy().retention_days + 1, hours=1)
    assert usage_storage_maintain(now=later).minute_days_dropped >= 1
    assert not UsageMinute.objects.exists()
    assert f"market_usageminute_p{day:%Y%m%d}" not in _partitions("market_usageminute")


def test_sqlite_downsamples_and_deletes_the_same_way(running):
    """`make run`'s SQLite keeps plain tables: the same upkeep deletes the closed day's rows instead."""
    from tests.sqlite_twin import on_sqlite

    _, agent, _, lease = running
    uuids = [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu").order_by("gpu__index")]
    start = day_start(timezone.now()) - timedelta(days=3, hours=-2)
    with on_sqlite():
        for seq in range(1, 4):
            body = _report(lease, uuids, seq, start.timestamp() + 60 * (seq - 1))
            assert report_ingest(
                node_id=agent.node.pk, boot_epoch=1, seq=seq, sent_at=start, samples=parse_samples(body),
                leases=[], now=start,
            )  # fmt: skip
        assert UsageSample.objects.count() == 3
        stats = usage_storage_maintain()
        assert (stats.days_downsampled, stats.minute_rows) == (1, 1)
        assert not UsageSample.objects.exists()
        assert unpack_minutes(UsageMinute.objects.get().data).samples.tolist() == [6, 6, 6]
