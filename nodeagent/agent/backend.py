"""The one small interface both NVML backends implement (real: nvml.py, simulated: sim.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    index: int
    model: str
    memory_mb: int


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mb: float


@dataclass(frozen=True)
class GpuSample:
    uuid: str
    healthy: bool
    error: str  # why the GPU is unhealthy; "" when healthy
    util_pct: float
    mem_used_mb: float
    power_w: float
    energy_j: float  # the GPU's own cumulative counter (NVML: since the driver loaded)
    processes: tuple[GpuProcess, ...]


def unhealthy(uuid: str, error: str) -> GpuSample:
    """A GPU whose readings failed: reported with zeros (the protocol wants numbers) and the error."""
    return GpuSample(uuid, False, error[:500], 0.0, 0.0, 0.0, 0.0, ())


class GpuBackend(Protocol):
    def inventory(self) -> list[GpuInfo]:
        """The machine's GPUs, as registered."""
        ...

    def sample(self, bound: Mapping[str, Sequence[int]]) -> list[GpuSample]:
        """One reading of every GPU. bound maps a GPU's UUID to the sessions of the jobs bound to it: the
        simulated backend measures them; the real one sees the processes on each GPU through NVML itself."""
        ...

    def check(self, uuid: str) -> list[str]:
        """What keeps the GPU from going to another tenant, one phrase each; [] when it is clean: no process
        left, memory back to idle, no retired pages or remapped rows pending, no XID error since last asked
        (nodeagent.agent.sandbox_gpus)."""
        ...

    def close(self) -> None: ...
