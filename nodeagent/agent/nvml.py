"""The real backend: NVML through nvidia-ml-py (`import pynvml`).

Every NVML call is checked on its own: a GPU whose readings fail is reported unhealthy with the error text
and the agent goes on with the others. A reading the GPU does not support (power or energy on some boards)
is not a fault: power reads 0, energy is integrated from power by the agent instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml

from nodeagent.agent.backend import GpuInfo, GpuProcess, GpuSample, unhealthy

log = logging.getLogger(__name__)
MB = 1024 * 1024
IDLE_MB = 512  # memory in use on a GPU with no process (v2 reading, driver reservation apart): more is a leak


class NvmlUnavailable(Exception):
    """NVML cannot start (no driver, no library): the agent cannot run with this backend."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # old bindings return bytes


def _error(exc: pynvml.NVMLError) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # the message lookup needs the library; the type name is enough
        return type(exc).__name__


class NvmlBackend:
    def __init__(self) -> None:
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(_error(exc)) from exc
        self._gpus: list[tuple[GpuInfo, Any]] = []
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                info = GpuInfo(
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    index=index,
                    model=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_mb=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // MB,
                )
            except pynvml.NVMLError as exc:  # without its UUID a GPU cannot be registered or leased
                log.error("GPU %d left out: %s", index, _error(exc))
                continue
            self._gpus.append((info, handle))
        self._integrated: dict[str, tuple[float, float]] = {}  # uuid -> (energy J, monotonic time)
        self._xids: dict[str, int] = {}  # uuid -> the last critical XID seen since its last check
        self._events: Any = None
        try:  # XIDs come only as events: registered once, drained at every sample and check
            self._events = pynvml.nvmlEventSetCreate()
            for _info, handle in self._gpus:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._events)
        except pynvml.NVMLError as exc:  # not supported on some boards; the other checks still run
            log.warning("XID events not available: %s", _error(exc))

    def inventory(self) -> list[GpuInfo]:
        return [info for info, _ in self._gpus]

    def sample(self, bound: Mapping[str, Sequence[int]]) -> list[GpuSample]:
        self._drain_xids()
        return [self._sample(info.uuid, handle) for info, handle in self._gpus]

    def _drain_xids(self) -> None:
        if self._events is None:
            return
        for _ in range(1000):
            try:
                event = pynvml.nvmlEventSetWait(self._events, 0)
            except pynvml.NVMLError:  # Timeout: none waiting (or the set failed: nothing more to read)
                return
            try:
                uuid = _text(pynvml.nvmlDeviceGetUUID(event.device))
            except pynvml.NVMLError:
                continue
            self._xids[uuid] = int(event.eventData)

    def check(self, uuid: str) -> list[str]:
        """The checks between tenants (sandbox_gpus.py); a reading that fails is itself a reason."""
        handle = next((h for info, h in self._gpus if info.uuid == uuid), None)
        if handle is None:
            return ["not found by NVML"]
        self._drain_xids()
        problems = []
        try:
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if running:
                pids = ", ".join(str(int(p.pid)) for p in running)
                problems.append(f"{len(running)} process(es) left on it ({pids})")
            used = _memory_used(handle) / MB
            if used > IDLE_MB:
                problems.append(f"memory not back to idle: {used:.0f} MB used")
        except pynvml.NVMLError as exc:
            problems.append(f"cannot be read: {_error(exc)}")
        try:
            if pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle):
                problems.append("retired pages pending (the GPU needs a reset)")
        except pynvml.NVMLError:
            pass  # not supported (boards with row remapping instead): checked below
        try:
            remapped = pynvml.nvmlDeviceGetRemappedRows(
                handle
            )  # (correctable, uncorrectable, pending, failed)
            if remapped[2] or remapped[3]:
                problems.append("row remapping pending or failed (the GPU needs a reset)")
        except pynvml.NVMLError:
            pass  # not supported before Ampere
        if uuid in self._xids:
            problems.append(f"XID {self._xids.pop(uuid)} error")
        return problems

    def _sample(self, uuid: str, handle: Any) -> GpuSample:
        try:
            util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            mem = _memory_used(handle) / MB
            power = _optional(pynvml.nvmlDeviceGetPowerUsage, handle) / 1000.0  # mW
            energy_mj = _optional(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle, -1)
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError as exc:
            return unhealthy(uuid, _error(exc))
        energy = energy_mj / 1000.0 if energy_mj >= 0 else self._integrate(uuid, power)
        processes = tuple(GpuProcess(int(p.pid), (p.usedGpuMemory or 0) / MB) for p in running)
        return GpuSample(uuid, True, "", util, round(mem, 1), power, energy, processes)

    def _integrate(self, uuid: str, power_w: float) -> float:
        now = time.monotonic()
        energy, at = self._integrated.get(uuid, (0.0, now))
        energy += power_w * (now - at)
        self._integrated[uuid] = (energy, now)
        return energy

    def close(self) -> None:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.warning("nvmlShutdown: %s", _error(exc))


def _memory_used(handle: Any) -> int:
    """Bytes the GPU's processes use, as nvidia-smi shows them. The v1 call counts the driver's own
    reservation as used (615 MB on an idle H200 that nvidia-smi showed at 0 MiB, scripts/gpu_check.py); v2 keeps
    it apart. Drivers older than v2 (before r510) answer FUNCTION_NOT_FOUND or a version mismatch: v1 then."""
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used)
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def _optional(call: Callable[[Any], Any], handle: Any, default: float = 0.0) -> float:
    """A reading some GPUs lack: NOT_SUPPORTED gives default; any other error is a fault of the GPU."""
    try:
        return float(call(handle))
    except pynvml.NVMLError_NotSupported:
        return default
