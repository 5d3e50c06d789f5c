"""Reads of the stored GPU samples (docs/agent.md §Usage storage): the 10-s rows of the last days
(UsageSample), the 1-minute rows after them (UsageMinute), and protocol 1's JSON rows (UsageReport) stored
before issue 36, read beside them for one release. Billing never reads these: it reads LeaseUsage."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db.models import OuterRef, Q, Subquery

from inventory.models import Node
from market.models import UsageColumns, UsageMinute, UsageReport, UsageSample
from market.models.usage import RAW_KEEP_DAYS
from market.models.usage_blob import unpack, unpack_minutes

# A report spans at most 360 ticks of 10 s: a row whose first tick is this much before a window may reach it.
ROW_SPAN = timedelta(hours=1)


def day_start(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def samples_window(now: datetime) -> tuple[datetime, datetime]:
    """The first-tick times whose samples are stored: from the oldest day not yet downsampled to a day
    ahead of the server's clock."""
    return day_start(now) - timedelta(days=RAW_KEEP_DAYS), now + timedelta(days=1)


@dataclass(frozen=True)
class GpuTicks:
    """Ticks of some of a node's GPUs, from any of the three stores: `energy_rise` is each tick's energy used
    since the tick before (0 at a node's first tick), so the stores add up alike."""

    at: list[datetime]
    util: npt.NDArray[np.float64]  # ticks x GPUs
    mem_mb: npt.NDArray[np.float64]
    energy_rise: npt.NDArray[np.float64]


def _columns(ids: set[int]) -> dict[int, list[str]]:
    return {
        pk: uuids.split(",")
        for pk, uuids in UsageColumns.objects.filter(pk__in=ids).values_list("pk", "uuids")
    }


def _rise(
    counters: npt.NDArray[np.float64], last: dict[str, float], uuids: list[str]
) -> npt.NDArray[np.float64]:
    """Each tick's counter rise per GPU, continuing from `last` (updated); a counter that fell (the GPU's
    driver reloaded) counts from zero again."""
    prev = np.array([last.get(u, np.nan) for u in uuids])
    before = np.vstack((prev[None, :], counters[:-1]))
    rise = np.where(counters >= before, counters - before, counters)
    rise = np.where(np.isnan(before), 0.0, rise)
    for k, u in enumerate(uuids):
        last[u] = float(counters[-1, k])
    return rise


def node_ticks(*, node_id: int, uuids: set[str], start: datetime, end: datetime | None) -> GpuTicks:
    """The node's ticks of the GPUs `uuids` between start and end (None: now), oldest first, each stored
    tick once: 1-minute rows for days downsampled, 10-s rows after, protocol 1's rows from before."""
    parts: list[tuple[datetime, list[float], list[float], list[float]]] = []
    last: dict[str, float] = {}
    for at, util, mem, rise in _legacy(node_id, uuids, start, end, last):
        parts.append((at, util, mem, rise))
    minutes = UsageMinute.objects.filter(node_id=node_id, at__gte=start - ROW_SPAN)
    raw = UsageSample.objects.filter(node_id=node_id, at__gte=start - ROW_SPAN, ticks__gt=0)
    if end is not None:
        minutes, raw = minutes.filter(at__lte=end), raw.filter(at__lte=end)
    minute_rows = list(minutes.order_by("at").values_list("at", "columns_id", "data"))
    raw_rows = list(raw.order_by("at").values_list("at", "columns_id", "data"))
    names = _columns({c for _, c, _ in minute_rows + raw_rows if c is not None})
    minute_starts: set[datetime] = set()  # a minute's energy is what it used within itself
    for at, cols, data in minute_rows:
        mine = [k for k, u in enumerate(names.get(cols, [])) if u in uuids]
        if not mine:
            continue
        m = unpack_minutes(data)
        for i, minute in enumerate(m.minute):
            when = at + timedelta(minutes=int(minute))
            if when >= start and (end is None or when <= end):
                minute_starts.add(when)
                parts.append(
                    (when, list(m.util_avg[i, mine]), list(m.mem_avg_mb[i, mine]), list(m.energy_j[i, mine]))
                )
    for at, cols, data in raw_rows:
        columns = names.get(cols, [])
        mine = [k for k, u in enumerate(columns) if u in uuids]
        if not mine:
            continue
        t = unpack(data)
        rises = _rise(t.energy_j[:, mine], last, [columns[k] for k in mine])
        for i, ms in enumerate(t.t_ms):
            when = at + timedelta(milliseconds=int(ms))
            if when >= start and (end is None or when <= end):
                parts.append((when, t.util[i, mine].tolist(), t.mem_mb[i, mine].tolist(), rises[i].tolist()))
    parts.sort(key=lambda p: p[0])
    if not parts:
        empty = np.zeros((0, 0))
        return GpuTicks([], empty, empty, empty)
    if parts[0][0] not in minute_starts:  # a first 10-s tick: what it used came before the window
        parts[0] = (parts[0][0], parts[0][1], parts[0][2], [0.0] * len(parts[0][3]))
    return GpuTicks(
        at=[p[0] for p in parts],
        util=_ragged([p[1] for p in parts]),
        mem_mb=_ragged([p[2] for p in parts]),
        energy_rise=_ragged([p[3] for p in parts]),
    )


def _ragged(rows: list[list[float]]) -> npt.NDArray[np.float64]:
    """Rows of possibly different widths (a GPU missing from some report) as a matrix padded with NaN."""
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _legacy(
    node_id: int, uuids: set[str], start: datetime, end: datetime | None, last: dict[str, float]
) -> Iterator[tuple[datetime, list[float], list[float], list[float]]]:
    """Protocol 1's stored reports (before issue 36) in the window, as ticks."""
    reports = UsageReport.objects.filter(node_id=node_id, sent_at__gte=start)
    if end is not None:
        reports = reports.filter(sent_at__lte=end)
    for at, samples in reports.order_by("sent_at", "pk").values_list("sent_at", "samples"):
        mine = [s for s in samples if isinstance(s, dict) and s.get("uuid") in uuids]
        if not mine:
            continue
        rise = []
        for s in mine:
            counter, before = float(s.get("energy_j") or 0), last.get(s["uuid"])
            rise.append(0.0 if before is None else counter - before if counter >= before else counter)
            last[s["uuid"]] = counter
        yield (
            at,
            [float(s.get("util_pct") or 0) for s in mine],
            [float(s.get("mem_used_mb") or 0) for s in mine],
            rise,
        )


@dataclass(frozen=True)
class LatestReport:
    """A node's newest stored samples: when it was taken and each GPU's sample by UUID."""

    sent_at: datetime
    gpus: dict[str, dict[str, Any]]


def latest_samples(*, node_ids: list[int]) -> dict[int, LatestReport]:
    """Each node's newest stored tick (its highest boot epoch, then seq: the key serves it), in three queries
    for the nodes given (keys, rows, column orders); a node with none since issue 36 gets its newest protocol 1
    report."""
    newest = UsageSample.objects.filter(node_id=OuterRef("pk"), ticks__gt=0).order_by("-boot_epoch", "-seq")
    # Per node, one backward walk of each day's key (node, boot epoch, seq): never the node's whole history.
    keys = list(
        Node.objects.filter(pk__in=node_ids)
        .annotate(e=Subquery(newest.values("boot_epoch")[:1]), s=Subquery(newest.values("seq")[:1]))
        .filter(e__isnull=False)
        .values_list("pk", "e", "s")
    )
    out: dict[int, LatestReport] = {}
    wanted = [Q(node_id=node_id, boot_epoch=epoch, seq=seq) for node_id, epoch, seq in keys]
    rows: list[Any] = []
    if wanted:
        rows = list(
            UsageSample.objects.filter(reduce(operator.or_, wanted)).values_list(
                "node_id", "at", "columns_id", "data"
            )
        )
    names = _columns({c for _, _, c, _ in rows if c is not None})
    for node_id, at, cols, data in rows:
        if cols not in names:
            continue
        t = unpack(data)
        out[node_id] = LatestReport(
            at + timedelta(milliseconds=int(t.t_ms[-1])),
            {
                u: {"uuid": u, "util_pct": float(t.util[-1, k]), "mem_used_mb": float(t.mem_mb[-1, k]),
                    "power_w": float(t.power_w[-1, k]), "energy_j": float(t.energy_j[-1, k])}
                for k, u in enumerate(names[cols])
            },
        )  # fmt: skip
    rest = [n for n in node_ids if n not in out]
    if rest:
        out.update(_legacy_latest(rest))
    return out


def _legacy_latest(node_ids: list[int]) -> dict[int, LatestReport]:
    newest = (
        UsageReport.objects.filter(node_id=OuterRef("pk")).order_by("-boot_epoch", "-seq").values("pk")[:1]
    )
    ids = (
        Node.objects.filter(pk__in=node_ids)
        .annotate(report=Subquery(newest))
        .values_list("report", flat=True)
    )
    return {
        r.node_id: LatestReport(
            r.sent_at, {s["uuid"]: s for s in r.samples if isinstance(s, dict) and "uuid" in s}
        )
        for r in UsageReport.objects.filter(pk__in=[i for i in ids if i is not None])
    }
