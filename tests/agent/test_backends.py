"""The two GPU backends: NVML with pynvml replaced only at its function boundary, and the simulation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pynvml
import pytest

from nodeagent.agent import jobs, usage
from nodeagent.agent.nvml import NvmlBackend, NvmlUnavailable
from nodeagent.agent.records import Job
from nodeagent.agent.sim import SimBackend, gpu_uuid

MB = 1024 * 1024
UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]


@pytest.fixture
def nvml(monkeypatch):
    """Three GPUs behind pynvml's functions; GPU 1's readings fail, GPU 2 has no energy counter."""
    calls = {"init": 0, "shutdown": 0}
    driver = SimpleNamespace(memory_v2=True)
    processes: dict[int, list[SimpleNamespace]] = {0: [], 1: [], 2: []}

    def failing_on_1(value):
        def read(handle):
            if handle == 1:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            return value(handle)

        return read

    def energy(handle):
        if handle == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 5_000_000 + handle

    def memory(handle, version=None):
        """v1 counts the driver's reservation (615 MB, as on a real H200) as used; v2 keeps it apart."""
        used, reserved = (1000 + handle) * MB, 615 * MB
        if version is None:
            return SimpleNamespace(total=81559 * MB, used=used + reserved, free=0)
        if not driver.memory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        assert version == pynvml.nvmlMemory_v2
        return SimpleNamespace(total=81559 * MB, reserved=reserved, used=used, free=0)

    patches = {
        "nvmlInit": lambda: calls.__setitem__("init", calls["init"] + 1),
        "nvmlShutdown": lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        "nvmlDeviceGetCount": lambda: 3,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: UUIDS[h],
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",  # old bindings answer bytes
        "nvmlDeviceGetMemoryInfo": memory,
        "nvmlDeviceGetUtilizationRates": failing_on_1(lambda h: SimpleNamespace(gpu=90 + h, memory=10)),
        "nvmlDeviceGetPowerUsage": lambda h: 300_500,
        "nvmlDeviceGetTotalEnergyConsumption": energy,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: processes[h],
    }
    for name, fake in patches.items():
        monkeypatch.setattr(pynvml, name, fake)
    return SimpleNamespace(calls=calls, processes=processes, driver=driver)


def test_nvml_inventory_and_a_failing_gpu_reported_unhealthy_while_the_others_go_on(nvml):
    backend = NvmlBackend()
    assert [(g.uuid, g.index, g.model, g.memory_mb) for g in backend.inventory()] == [
        (u, i, "NVIDIA H100 80GB HBM3", 81559) for i, u in enumerate(UUIDS)
    ]
    nvml.processes[0].append(SimpleNamespace(pid=4242, usedGpuMemory=300 * MB))
    nvml.processes[2].append(SimpleNamespace(pid=99, usedGpuMemory=None))  # not reported on some systems
    good, lost, no_energy = backend.sample({})
    assert (good.healthy, good.error, good.util_pct, good.mem_used_mb) == (True, "", 90.0, 1000.0)
    assert (good.power_w, good.energy_j) == (300.5, 5000.0)
    assert [(p.pid, p.used_mb) for p in good.processes] == [(4242, 300.0)]
    assert not lost.healthy and "GpuIsLost" in lost.error
    assert (lost.util_pct, lost.processes) == (0.0, ())
    # No energy counter is no fault: the agent integrates power instead.
    assert no_energy.healthy and no_energy.util_pct == 92.0 and no_energy.processes[0].used_mb == 0
    time.sleep(0.2)
    assert backend.sample({})[2].energy_j >= 300.5 * 0.2
    backend.close()
    assert nvml.calls == {"init": 1, "shutdown": 1}


def test_nvml_memory_used_leaves_out_the_drivers_reservation_where_the_driver_can(nvml):
    backend = NvmlBackend()
    assert backend.sample({})[0].mem_used_mb == 1000.0  # as nvidia-smi shows it
    nvml.driver.memory_v2 = False  # a driver before r510: v1 alone, reservation included
    assert backend.sample({})[0].mem_used_mb == 1615.0


def test_nvml_that_cannot_start_says_why(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with pytest.raises(NvmlUnavailable, match="DriverNotLoaded"):
        NvmlBackend()


def _job(lease: int, gpus: list[str], pid: int) -> Job:
    return Job(
        lease,
        lease,
        "t",
        ["x"],
        gpus,
        60,
        5,
        "/c",
        "/w",
        "/nonexistent.log",
        "/e",
        pid=pid,
        started_at=time.time(),
    )


def _session(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *argv], start_new_session=True)


def _spawn(tmp_path, lease: int, gpu: str, *argv: str) -> Job:
    """A job started the agent's way: under the shim, in a session of its own."""
    run = tmp_path / str(lease)
    job = Job(
        lease,
        lease,
        "t",
        [sys.executable, *argv],
        [gpu],
        60,
        5,
        str(run / "ckpt"),
        str(run),
        str(run / "log"),
        str(run / "exit.json"),
    )
    jobs.spawn(job)
    return job


def test_nvml_processes_are_tied_to_the_lease_holding_the_gpu_or_reported_foreign(nvml):
    backend = NvmlBackend()
    ours = _session("-c", "import time; time.sleep(30)")
    try:
        nvml.processes[0] += [
            SimpleNamespace(pid=ours.pid, usedGpuMemory=MB),
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=MB),
        ]
        nvml.processes[2] += [SimpleNamespace(pid=ours.pid, usedGpuMemory=MB)]  # on a GPU its lease lacks
        samples = backend.sample({})
        job = _job(41, [UUIDS[0]], ours.pid)
        usage.measure([job], samples, time.time())
        report = usage.report(boot_epoch=1, seq=1, now=time.time(), samples=samples, jobs=[job])
        procs = {g["uuid"]: [(p["pid"], p["lease"]) for p in g["processes"]] for g in report["gpus"]}
        assert procs[UUIDS[0]] == [(ours.pid, 41), (os.getpid(), None)]
        assert procs[UUIDS[2]] == [(ours.pid, None)]
        assert [g["healthy"] for g in report["gpus"]] == [True, False, True]
        assert report["leases"][0]["util_max"] == 90.0 and report["leases"][0]["samples"] == 1
    finally:
        ours.kill()
        ours.wait()


def test_sim_gpus_read_busy_under_a_computing_job_and_idle_under_a_sleeping_one(tmp_path):
    backend = SimBackend(name="node-s", count=3, model="NVIDIA A100-SXM4-40GB", state_dir=tmp_path)
    gpus = [g.uuid for g in backend.inventory()]
    assert gpus == [
        g.uuid for g in SimBackend(name="node-s", count=3, model="x", state_dir=tmp_path).inventory()
    ]
    assert backend.inventory()[0].memory_mb == 40 * 1024
    assert gpus[2] == gpu_uuid("node-s", 2) != gpu_uuid("node-t", 2)
    busy = _spawn(tmp_path, 1, gpus[0], "-m", "nodeagent.agent.demo_job", "--seconds", "30")
    idle = _spawn(tmp_path, 2, gpus[1], "-m", "nodeagent.agent.demo_job", "--seconds", "30", "--idle")
    try:
        bound = {gpus[0]: [busy.pid], gpus[1]: [idle.pid]}
        time.sleep(1.0)  # past the interpreter's start, which costs CPU even in a job that then sleeps
        backend.sample(bound)
        time.sleep(1.5)
        hot, cold, free = backend.sample(bound)
        # The machine running the tests may be shared: the busy job gets what CPU it can, not a whole core.
        assert (
            hot.util_pct > 5 and hot.util_pct > 4 * cold.util_pct and cold.util_pct < 3 and free.util_pct == 0
        )
        assert hot.power_w > cold.power_w and hot.energy_j > cold.energy_j > 0
        # The job's process is listed (not its shim), with its resident memory.
        assert [p.pid for p in hot.processes] and busy.pid not in [p.pid for p in hot.processes]
        assert hot.mem_used_mb > 1 and free.processes == ()
    finally:
        for job in (busy, idle):
            jobs.signal_job(job, signal.SIGKILL)
    backend.close()
    again = SimBackend(name="node-s", count=3, model="x", state_dir=tmp_path).sample({})
    assert again[0].energy_j >= hot.energy_j  # the counter never goes back across a restart
