"""Simulated GPUs for machines without one (the demo, the tests, the benchmark).

N GPUs with UUIDs derived from the node name (stable across restarts). A GPU's utilisation is the CPU time
its jobs' processes used since the last sample (one busy core per GPU reads 100%), so a demo job that computes
shows up busy and one that sleeps shows up idle; memory is their resident memory; power is linear in
utilisation; energy integrates power and is kept in the state directory, so the counter never goes back.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodeagent.agent import procfs
from nodeagent.agent.backend import GpuInfo, GpuProcess, GpuSample
from nodeagent.agent.fsutil import read_json, write_json

IDLE_W = 60.0
BUSY_W = 700.0
DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
_NAMESPACE = uuid.UUID("6f1c2a5e-8a4b-4d7e-9c1f-2b3a4c5d6e7f")
MB = 1024 * 1024


def gpu_uuid(name: str, index: int) -> str:
    """The simulated GPU `index` of node `name`: the same on every start (demo data may create it ahead)."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{name}/{index}')}"


def memory_of(model: str) -> int:
    """MiB from the model string ("... 80GB ..." -> 81920), 81920 when it names none."""
    found = re.search(r"(\d+)\s*GB", model)
    return int(found.group(1)) * 1024 if found else 81920


class SimBackend:
    def __init__(self, *, name: str, count: int, model: str, state_dir: Path) -> None:
        self._gpus = [GpuInfo(gpu_uuid(name, i), i, model, memory_of(model)) for i in range(count)]
        self._energy_path = state_dir / "sim-energy.json"
        saved = read_json(self._energy_path) or {}
        self._energy = {g.uuid: float(saved.get(g.uuid, 0.0)) for g in self._gpus}
        self._cpu: dict[int, int] = {}  # session -> CPU ticks at the last sample
        # Faults a test or a demo injects per GPU: {"processes": [pid...], "memory_mb": N,
        # "retired_pages_pending": true, "xid": 79}. Read at every sample and check.
        self._faults_path = state_dir / "sim-faults.json"
        self._at = time.monotonic()

    def inventory(self) -> list[GpuInfo]:
        return list(self._gpus)

    def sample(self, bound: Mapping[str, Sequence[int]]) -> list[GpuSample]:
        now = time.monotonic()
        elapsed = max(now - self._at, 1e-6)
        self._at = now
        gpus_of: dict[int, int] = {}
        for sessions in bound.values():
            for sid in sessions:
                gpus_of[sid] = gpus_of.get(sid, 0) + 1
        procs = procfs.sessions(set(gpus_of))
        cores: dict[int, float] = {}
        for sid, members in procs.items():
            ticks = sum(p.cpu_ticks for p in members)
            # A member that died unreaped takes its time with it: never count backwards.
            cores[sid] = max(0, ticks - self._cpu.get(sid, ticks)) / procfs.TICKS_PER_S / elapsed
            self._cpu[sid] = ticks
        for sid in set(self._cpu) - set(procs):
            del self._cpu[sid]
        samples = []
        for gpu in self._gpus:
            sids = bound.get(gpu.uuid, ())
            util = min(100.0, float(sum(100.0 * cores[s] / gpus_of[s] for s in sids)))
            processes = tuple(
                GpuProcess(p.pid, round(p.rss_bytes / MB / gpus_of[s], 1))
                for s in sids
                for p in procs[s]
                if p.pid != s  # the shim is the agent's, not the job's
            ) + tuple(GpuProcess(pid, 100.0) for pid in self._injected(gpu.uuid))
            mem = min(float(gpu.memory_mb), float(sum(p.used_mb for p in processes)))
            power = IDLE_W + (BUSY_W - IDLE_W) * util / 100.0
            self._energy[gpu.uuid] += power * elapsed
            samples.append(
                GpuSample(gpu.uuid, True, "", round(util, 1), mem, power, self._energy[gpu.uuid], processes)
            )
        write_json(self._energy_path, self._energy, durable=False)
        return samples

    def _faults(self, uuid: str) -> dict[str, Any]:
        faults = read_json(self._faults_path) or {}
        return dict(faults.get(uuid) or {})

    def _injected(self, uuid: str) -> list[int]:
        """Injected processes still alive: they show on the GPU like a process NVML sees."""
        return [pid for pid in self._faults(uuid).get("processes", []) if procfs.stat(int(pid)) is not None]

    def check(self, uuid: str) -> list[str]:
        faults = self._faults(uuid)
        problems = []
        if pids := self._injected(uuid):
            problems.append(f"{len(pids)} process(es) left on it ({', '.join(map(str, pids))})")
        if faults.get("memory_mb"):
            problems.append(f"memory not back to idle: {faults['memory_mb']} MB used")
        if faults.get("retired_pages_pending"):
            problems.append("retired pages pending (the GPU needs a reset)")
        if faults.get("xid"):
            problems.append(f"XID {faults['xid']} error")
        return problems

    def close(self) -> None:
        write_json(self._energy_path, self._energy)
