"""What the job sandbox costs at start: job start latency with and without it (median over 50 starts).

    .venv/bin/python bench/sandbox.py        # one JSON line: {"bench": "sandbox", "plain_ms": ..., ...}

Each start is jobs.spawn (the agent's own code) of an empty job (`/bin/true`) until its shim has written the
job's exit record: the shim's start, the job's exec and its end, with or without bubblewrap, setpriv, a
tenant's user and the job's cgroups (memory, cpu, pids) around it. Then the usage sampling: the median of 50
simulated samples of 8 GPUs each running a sleeping job, plain and sandboxed (it must not change). Needs root and bubblewrap for the
sandboxed half (as the agent does); otherwise it says so and measures the plain half only.
Target (issue 35): the sandbox adds under 100 ms.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeagent.agent import jobs, sandbox_cgroups  # noqa: E402
from nodeagent.agent.records import Job  # noqa: E402
from nodeagent.agent.sandbox import Sandbox, SandboxUnavailable  # noqa: E402
from nodeagent.agent.sandbox_cgroups import Cgroups, Limits  # noqa: E402
from nodeagent.agent.sim import SimBackend  # noqa: E402

STARTS = 50
TARGET_MS = 100.0
UID = 61999  # a uid no one has: setpriv needs none in /etc/passwd


def one_start(root: Path, n: int, sandbox: Sandbox | None, cgroups: Cgroups | None) -> float:
    started = time.perf_counter()
    job, child = spawn(root, n, ["/bin/true"], sandbox, cgroups)
    child.wait()
    elapsed = time.perf_counter() - started
    exit_code = json.loads(Path(job.exit_path).read_text())["exit_code"]
    if exit_code != 0:
        raise SystemExit(
            f"bench/sandbox.py: the empty job failed ({exit_code}): {Path(job.log_path).read_text()}"
        )
    for _ in range(50):  # the sandbox's last processes may take a moment more to leave their groups
        if sandbox_cgroups.remove(job.cgroups):
            break
        time.sleep(0.02)
    return elapsed * 1000


def sampling_ms(root: Path, sandbox: Sandbox | None, cgroups: Cgroups | None) -> float:
    """Median time of one simulated sample of 8 GPUs, each with a job that sleeps: the sampling walks the
    jobs' sessions in /proc, which the sandbox must leave as they were."""
    running = [spawn(root, 100 + i, ["/bin/sleep", "60"], sandbox, cgroups) for i in range(8)]
    try:
        time.sleep(0.5)
        backend = SimBackend(name="bench", count=8, model="NVIDIA H100 80GB HBM3", state_dir=root)
        bound = {g.uuid: [job.pid] for g, (job, _c) in zip(backend.inventory(), running, strict=True)}
        times = []
        for _ in range(STARTS):
            at = time.perf_counter()
            samples = backend.sample(bound)
            times.append((time.perf_counter() - at) * 1000)
        if not all(s.processes for s in samples):
            raise SystemExit("bench/sandbox.py: a job's processes were not seen on its GPU")
        return statistics.median(times)
    finally:
        for job, child in running:
            os.killpg(job.pid, signal.SIGKILL)
            child.wait()
        for job, _child in running:  # the sandbox's processes may take a moment more to leave their groups
            for _ in range(50):
                if sandbox_cgroups.remove(job.cgroups):
                    break
                time.sleep(0.02)


def spawn(
    root: Path, n: int, argv: list[str], sandbox: Sandbox | None, cgroups: Cgroups | None
) -> tuple[Job, subprocess.Popen[bytes]]:
    run = root / "run" / str(n)
    job = Job(
        lease=n,
        job=n,
        name="bench",
        argv=argv,
        gpus=["GPU-bench-0"],
        max_seconds=60,
        grace_seconds=1,
        checkpoint_dir=str(root / "checkpoints" / str(n)),
        work_dir=str(run / "work"),
        log_path=str(root / "logs" / f"{n}.log"),
        exit_path=str(run / "exit.json"),
        run_as=[UID, UID] if sandbox else None,
        sandboxed=sandbox is not None,
    )
    (root / "logs").mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    if cgroups is not None:
        job.cgroups = cgroups.create(
            f"bench-{os.getpid()}-{n}", Limits(cpus=1, memory_bytes=1 << 30, pids=64)
        )
    return job, jobs.spawn(job, sandbox, [0])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        plain = [one_start(root / "plain", i, None, None) for i in range(STARTS)]
        plain_sample = sampling_ms(root / "plain", None, None)
        result: dict[str, object] = {
            "bench": "sandbox",
            "starts": STARTS,
            "plain_ms": round(statistics.median(plain), 1),
            "sample_plain_ms": round(plain_sample, 2),
        }
        try:
            sandbox = Sandbox.probe(device_root=Path("/dev"), hidden=[str(root / "boxed")])
        except SandboxUnavailable as exc:
            result.update({"sandboxed_ms": None, "why_not": str(exc)})
        else:
            cgroups = Cgroups.detect()
            boxed = [one_start(root / "boxed", i, sandbox, cgroups) for i in range(STARTS)]
            added = statistics.median(boxed) - statistics.median(plain)
            result.update(
                {
                    "sample_sandboxed_ms": round(sampling_ms(root / "boxed", sandbox, cgroups), 2),
                    "sandboxed_ms": round(statistics.median(boxed), 1),
                    "added_ms": round(added, 1),
                    "cgroup": cgroups.version or None,
                    "target_added_ms": TARGET_MS,
                    "ok": added < TARGET_MS,
                }
            )
        print(json.dumps(result))


if __name__ == "__main__":
    main()
