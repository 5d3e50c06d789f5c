"""From GPU samples to usage reports (docs/agent.md, `POST usage`): per-lease cumulative counters, each
GPU's processes tied to the lease that owns them, the job's log tail."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from nodeagent.agent import procfs
from nodeagent.agent.backend import GpuSample
from nodeagent.agent.records import Job

LOG_TAIL_BYTES = 64 * 1024


def iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def measure(jobs: Iterable[Job], samples: list[GpuSample], now: float) -> None:
    """Add one sample to the counters of each running job. A GPU's energy since the last sample is shared
    between the jobs on it (two overlap while a preempted job's grace runs into the next one's start)."""
    by_uuid = {s.uuid: s for s in samples}
    jobs = list(jobs)
    sharing: dict[str, int] = {}
    for job in jobs:
        for uuid in job.gpus:
            sharing[uuid] = sharing.get(uuid, 0) + 1
    for job in jobs:
        c = job.counters
        c.gpu_seconds = len(job.gpus) * max(0.0, now - job.started_at)
        readings = [by_uuid[u] for u in job.gpus if u in by_uuid and by_uuid[u].healthy]
        job.seen_at = now
        if not readings:
            continue
        c.samples += 1
        c.util_sum += sum(r.util_pct for r in readings) / len(readings)
        c.util_max = max(c.util_max, *(r.util_pct for r in readings))
        c.mem_sum += sum(r.mem_used_mb for r in readings) / len(readings)
        c.mem_max = max(c.mem_max, *(r.mem_used_mb for r in readings))
        for r in readings:
            seen = c.energy_seen.get(r.uuid)
            if (
                seen is not None and r.energy_j >= seen
            ):  # a counter that went back (driver reload) adds nothing
                c.energy_j += (r.energy_j - seen) / sharing[r.uuid]
            c.energy_seen[r.uuid] = r.energy_j


def lease_summary(job: Job) -> dict[str, Any]:
    """A lease's counters as reported, with its newest checkpoint when it made one (an old server ignores
    the extra field)."""
    summary = job.counters.summary()
    if job.checkpoint_at:
        summary["checkpoint_at"] = iso(job.checkpoint_at)
    return summary


def finish(job: Job) -> None:
    """The final gpu_seconds: from the job's start to its end."""
    assert job.outcome is not None
    job.counters.gpu_seconds = len(job.gpus) * max(0.0, job.outcome.ended_at - job.started_at)


class LogTails:
    """The last 64 KiB of each job's log, read again only when the file changed."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple[int, int], str]] = {}

    def tail(self, path: str) -> str:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return ""
        key = (st.st_size, st.st_mtime_ns)
        cached = self._cache.get(path)
        if cached and cached[0] == key:
            return cached[1]
        with open(path, "rb") as f:
            f.seek(max(0, st.st_size - LOG_TAIL_BYTES))
            # Cut at a character boundary from the end; NUL bytes have no place in the server's text column.
            text = f.read().decode("utf-8", errors="replace").replace("\x00", "")
        self._cache[path] = (key, text)
        return text

    def forget(self, path: str) -> None:
        self._cache.pop(path, None)


def owners(samples: list[GpuSample], jobs: Iterable[Job]) -> dict[int, int]:
    """pid -> lease, for the processes on the GPUs that belong to a job's session."""
    by_session = {job.pid: job.lease for job in jobs if job.pid}
    found = {}
    for sample in samples:
        for p in sample.processes:
            s = procfs.stat(p.pid)
            if s is not None and s.session in by_session:
                found[p.pid] = by_session[s.session]
    return found


def report(
    *, boot_epoch: int, seq: int, now: float, samples: list[GpuSample], jobs: list[Job]
) -> dict[str, Any]:
    """A usage report, as spooled: the log tails are added when it is sent. A process counts for a lease only
    on a GPU that lease holds; any other is foreign."""
    pid_lease = owners(samples, jobs)
    covers = {(uuid, job.lease) for job in jobs for uuid in job.gpus}
    at = iso(now)
    gpus = [
        {
            "uuid": s.uuid,
            "at": at,
            "healthy": s.healthy,
            "util_pct": s.util_pct,
            "mem_used_mb": s.mem_used_mb,
            "power_w": round(s.power_w, 3),
            "energy_j": round(s.energy_j, 3),
            "processes": [
                {
                    "pid": p.pid,
                    "used_mb": p.used_mb,
                    "lease": lease if (lease := pid_lease.get(p.pid)) and (s.uuid, lease) in covers else None,
                }
                for p in s.processes
            ],
        }
        for s in samples
    ]
    leases = [{"lease": job.lease, **lease_summary(job)} for job in jobs]
    return {"boot_epoch": boot_epoch, "seq": seq, "sent_at": at, "gpus": gpus, "leases": leases}


MAX_TICKS = 360  # samples in one protocol 2 report at most: an hour at 10 s (the server's bound too)


def tick_time(tick: dict[str, Any]) -> float:
    return datetime.fromisoformat(tick["sent_at"]).timestamp()


def chunk(ticks: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The oldest ticks that go in one report: at most MAX_TICKS, all with the same GPUs (a report's
    matrices have one column per GPU), each later than the one before (the server wants them ascending; a
    tick from a clock that stepped back is left out of the report's samples, its counters still count)."""
    if not ticks:
        return []
    columns = [g["uuid"] for g in ticks[0][1]["gpus"]]
    taken = []
    for name, tick in ticks[:MAX_TICKS]:
        if [g["uuid"] for g in tick["gpus"]] != columns:
            break
        taken.append((name, tick))
    return taken


def columns(ticks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Spooled ticks (one protocol 1 usage report each, oldest first) as a protocol 2 report's `usage`:
    one row per tick, one column per GPU (docs/agent.md §Protocol 2). None when there is none."""
    rows: list[dict[str, Any]] = []
    last = 0.0
    for tick in ticks:
        t = tick_time(tick)
        if t > last:
            rows.append(tick)
            last = t
    if not rows:
        return None
    newest = rows[-1]
    return {
        "gpus": [g["uuid"] for g in rows[0]["gpus"]],
        "t": [round(tick_time(tick), 3) for tick in rows],
        "util": [[g["util_pct"] for g in tick["gpus"]] for tick in rows],
        "mem_mb": [[g["mem_used_mb"] for g in tick["gpus"]] for tick in rows],
        "power_w": [[g["power_w"] for g in tick["gpus"]] for tick in rows],
        "energy_j": [[g["energy_j"] for g in tick["gpus"]] for tick in rows],
        "lease": [[_lease_on(g) for g in tick["gpus"]] for tick in rows],
        "foreign": [[sum(p["lease"] is None for p in g["processes"]) for g in tick["gpus"]] for tick in rows],
        "processes": [{"gpu": g["uuid"], **p} for g in newest["gpus"] for p in g["processes"]],
    }


def _lease_on(gpu: dict[str, Any]) -> int:
    return next((p["lease"] for p in gpu["processes"] if p["lease"]), 0)


def newest_counters(ticks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each lease's cumulative counters from the newest tick that has them (counters only grow)."""
    found: dict[int, dict[str, Any]] = {}
    for tick in ticks:
        for counters in tick["leases"]:
            found[counters["lease"]] = counters
    return [found[lease] for lease in sorted(found)]
