"""Between tenants: a GPU is checked before another tenant's job gets it, and a process no lease holds is
killed after a grace period (docs/agent.md §Between tenants).

Before a bind gives a GPU to a tenant other than the one whose job last ran on it, the backend checks it
(NVML: no process left, memory back to idle, no retired pages or remapped rows pending, no XID error since
the last check; the simulated backend reads faults a test or a demo injects). A GPU that fails is drained:
the bind is refused with the reason, the heartbeat reports the GPU unhealthy with "drained: <reason>" (the
console shows it, rounds give it no work), and it is checked again at every sample until it passes, as
Slurm's epilog drains a node and its health check resumes it. The record (last tenant per GPU, drained GPUs,
events not yet sent) lives in the state directory, so a restart forgets nothing.

A process on a GPU that belongs to no running job's session (reported as foreign in every usage report)
is killed with SIGKILL once it has been seen for kill_foreign_after seconds (0: reported only, the default);
each kill and each drain is an event the next heartbeat carries and the server audits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from nodeagent.agent import procfs
from nodeagent.agent.backend import GpuBackend, GpuSample
from nodeagent.agent.fsutil import read_json, write_json

MAX_EVENTS = 100  # kept for the server; older ones are dropped (and said in the log) during a long outage


class GpuDrained(Exception):
    """A GPU of the bind failed its check or is drained; the message says which and why."""


class GpuGuard:
    def __init__(self, *, state_root: Path, backend: GpuBackend, kill_foreign_after: float) -> None:
        self.path = state_root / "gpu-guard.json"
        self.backend = backend
        self.kill_foreign_after = kill_foreign_after
        saved: dict[str, Any] = read_json(self.path) or {}
        self.tenant_of: dict[str, str] = saved.get("tenant_of", {})  # GPU -> tenant of the last job on it
        self.drained: dict[str, str] = saved.get("drained", {})  # GPU -> why
        self.events: list[dict[str, Any]] = saved.get("events", [])
        self.foreign_seen: dict[int, tuple[int, float]] = {}  # pid -> (start ticks, first seen)

    def save(self) -> None:
        self.events = self.events[-MAX_EVENTS:]
        write_json(self.path, {"tenant_of": self.tenant_of, "drained": self.drained, "events": self.events})

    def _event(self, kind: str, gpu: str, detail: str, pid: int | None = None) -> None:
        self.events.append({"kind": kind, "gpu": gpu, "pid": pid, "detail": detail[:500], "at": time.time()})

    def before_bind(self, gpus: list[str], tenant: str, held: set[str]) -> None:
        """Check each GPU passing to another tenant; GpuDrained (nothing recorded for the bind) if one fails.
        A GPU still held by a job in its grace period (held) cannot be checked yet: it is not, said in the log
        by the caller; its handover is checked at the next bind."""
        if not tenant:
            return
        for uuid in gpus:
            if uuid in self.drained:
                raise GpuDrained(f"GPU {uuid} is drained: {self.drained[uuid]}")
        for uuid in gpus:
            last = self.tenant_of.get(uuid)
            if last is None or last == tenant or uuid in held:
                continue
            problems = self.backend.check(uuid)
            if problems:
                reason = "; ".join(problems)
                self.drained[uuid] = reason
                self._event("gpu_drained", uuid, f"before {tenant}'s job (after {last}'s): {reason}")
                self.save()
                raise GpuDrained(f"GPU {uuid} failed its check between tenants and is drained: {reason}")
        for uuid in gpus:
            self.tenant_of[uuid] = tenant
        self.save()

    def recheck(self, busy: set[str]) -> None:
        """Drained GPUs that no job holds are checked again; one that passes takes work again."""
        cleared = [u for u in self.drained if u not in busy and not self.backend.check(u)]
        for uuid in cleared:
            self._event("gpu_resumed", uuid, f"passed its check (was: {self.drained.pop(uuid)})")
            self.tenant_of.pop(uuid, None)
        if cleared:
            self.save()

    def health(self, samples: list[GpuSample]) -> list[dict[str, Any]]:
        """The heartbeat's GPU health: a drained GPU is unhealthy with its reason."""
        out = []
        for s in samples:
            if s.uuid in self.drained:
                out.append(
                    {"uuid": s.uuid, "healthy": False, "error": f"drained: {self.drained[s.uuid]}"[:500]}
                )
            else:
                out.append({"uuid": s.uuid, "healthy": s.healthy, "error": s.error})
        return out

    def foreign(self, samples: list[GpuSample], owned: set[int], now: float) -> list[int]:
        """Kill the processes on a GPU that no running job owns once seen for kill_foreign_after seconds;
        returns their pids. Never the agent itself, never pid 1; a pid reused by another process meanwhile
        (another start time) starts its grace again."""
        if self.kill_foreign_after <= 0:
            return []
        seen_now: dict[int, str] = {}
        for s in samples:
            for p in s.processes:
                if p.pid not in owned and p.pid > 1 and p.pid != os.getpid():
                    seen_now[p.pid] = s.uuid
        killed = []
        for pid, uuid in seen_now.items():
            found = procfs.stat(pid)
            if found is None:
                continue
            start, first = self.foreign_seen.get(pid, (found.start_ticks, now))
            if start != found.start_ticks:
                start, first = found.start_ticks, now
            self.foreign_seen[pid] = (start, first)
            if now - first >= self.kill_foreign_after:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    self._event(
                        "foreign_killed",
                        uuid,
                        f"process {pid} on the GPU held by no lease, killed after {self.kill_foreign_after:g} s",
                        pid,
                    )
        for pid in set(self.foreign_seen) - set(seen_now) | set(killed):
            self.foreign_seen.pop(pid, None)
        if killed:
            self.save()
        return killed

    def sent(self, count: int) -> None:
        """The first count events reached the server."""
        if count:
            del self.events[:count]
            self.save()
