"""The node agent's own CPU cost: one agent, 8 simulated GPUs, a sample every second, against a local fake server.

    .venv/bin/python bench/agent.py                 # one JSON line: {"bench": "agent", "cpu_pct_of_core": ...}
    .venv/bin/python bench/agent.py --seconds 60

Eight single-GPU jobs (`sleep`) are bound, so each sample walks real job sessions in /proc, spools a report
(fsync) and sends it. The agent's CPU time is read from /proc/<pid>/schedstat (nanoseconds on a CPU; its own,
not its jobs') over the measured window, after a warm-up. The baseline, measured over the same window in the
same run, is a bare Python process that only sleeps the same interval in a loop; ratio = agent / baseline.
Target (issue 16): under 2% of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.agent.fakeserver import BOOTSTRAP, FakeServer, wait_for  # noqa: E402

TARGET_PCT = 2.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    server = FakeServer()
    server.start()
    env = {**os.environ, "GPUMARKET_BOOTSTRAP_TOKEN": BOOTSTRAP, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        agent = subprocess.Popen(
            [sys.executable, "-m", "nodeagent.agent", "--server", server.url, "--state-dir", tmp, "--backend", "sim",
             "--sim-gpus", str(args.gpus), "--interval", str(args.interval), "--name", "bench-node",
             "--log-level", "warning"],
            env=env, cwd=REPO,
        )  # fmt: skip
        baseline = subprocess.Popen(
            [sys.executable, "-c", f"import time\nwhile True: time.sleep({args.interval})"], cwd=REPO
        )
        try:
            wait_for(lambda: server.heartbeats, 30, "the agent's registration")
            for i, uuid in enumerate(server.gpus()):
                server.bind(i + 1, "sleep 3600", gpus=[uuid], max_seconds=7200)
            wait_for(lambda: len(server.started) == args.gpus, 30, "the jobs' starts")
            time.sleep(2 * args.interval)  # past the binds
            reports_before, start = len(server.usage), time.monotonic()
            agent_cpu, base_cpu = cpu_seconds(agent.pid), cpu_seconds(baseline.pid)
            time.sleep(args.seconds)
            elapsed = time.monotonic() - start
            agent_cpu, base_cpu = cpu_seconds(agent.pid) - agent_cpu, cpu_seconds(baseline.pid) - base_cpu
            reports = len(server.usage) - reports_before
        finally:
            for lease in list(server.started):
                server.stop_lease("release", lease, grace=1)
            if agent.poll() is None:
                wait_for(lambda: len(server.exited) == len(server.started), 30, "the jobs' exits")
            agent.terminate()
            baseline.kill()
            agent.wait(30)
            baseline.wait()
            server.stop()
    agent_pct, base_pct = 100 * agent_cpu / elapsed, 100 * base_cpu / elapsed
    print(
        json.dumps(
            {
                "bench": "agent",
                "cpu_pct_of_core": round(agent_pct, 3),
                "interval_s": args.interval,
                "gpus": args.gpus,
                "jobs": args.gpus,
                "seconds": round(elapsed, 1),
                "reports": reports,
                "baseline_cpu_pct": round(base_pct, 4),
                "ratio": round(agent_pct / base_pct, 1) if base_pct else None,
                "target_pct": TARGET_PCT,
                "met": agent_pct < TARGET_PCT,
            }
        )
    )


if __name__ == "__main__":
    main()
