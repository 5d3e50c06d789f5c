#!/usr/bin/env python3
"""Start one simulated node agent per demo node (the Procfile's `agents` line under `make run`).

`manage.py demo_data` prepares var/agents/<node>/: demo.json (GPU count and model) and, until the node has
registered, a one-time bootstrap token. This script waits for the web server, starts `gpumarket-agent` with
the sim backend for each directory, runs `manage.py demo_data` once more when every node has registered (so the
demo jobs, which need nodes, are submitted), restarts an agent that exits, and on SIGTERM or Ctrl-C stops its
agents (they leave their jobs running; the next start adopts them) and exits. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = Path(os.environ.get("GPUMARKET_VAR_DIR") or ROOT / "var")
SERVER = os.environ.get("AGENT_SERVER", "http://127.0.0.1:8000")
RESTART_AFTER_S = 5


def log(message: str) -> None:
    print(f"demo-agents: {message}", flush=True)


def wait_for_server(timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{SERVER}/api/v1/agent/heartbeat", timeout=2)
        except urllib.error.HTTPError:
            return  # 401 or 405: the server answers
        except OSError:
            time.sleep(1)
        else:
            return
    raise SystemExit(f"demo-agents: no server at {SERVER} after {timeout_s:.0f} s")


def others_can_run(path: str) -> bool:
    """Whether a user other than root can run this program: every directory on its real path enterable by
    others and the file executable by them (a Python under /root is not)."""
    real = Path(os.path.realpath(path))
    return all(os.stat(p).st_mode & 0o001 for p in [*real.parents, real])


def sandbox_flags() -> list[str]:
    """As root (as on a real node) every job runs in the sandbox where the kernel allows it (docs/agent.md
    §The sandbox), and each tenant's as its own user when the demo's `python` is one they can run. Not as
    root: no sandbox, said at registration as off (a node without it takes only trusted tenants' jobs only
    when its kernel refused it, not when it was never asked for)."""
    if os.geteuid() != 0:
        return ["--sandbox", "off"]
    flags = ["--sandbox", "auto"]
    python = shutil.which("python")
    if python and others_can_run(python):
        flags += ["--tenant-uids", "61000-61999"]
    return flags


def agent_command(state: Path) -> list[str]:
    demo = json.loads((state / "demo.json").read_text())
    command = [
        sys.executable,
        "-m",
        "nodeagent.agent",
        "--server",
        SERVER,
        "--state-dir",
        str(state),
        "--backend",
        "sim",
        "--sim-gpus",
        str(demo["gpus"]),
        "--sim-model",
        demo["model"],
        "--checkpoint-root",
        str(VAR / "checkpoints"),
        "--name",
        state.name,
        "--interval",
        "5",  # a sample every 5 s, so the demo's usage moves while you watch
    ]
    command += sandbox_flags()
    if demo.get("address"):  # each node its own loopback address: a gang's parts meet across "nodes"
        command += ["--address", demo["address"]]
    token = state / "bootstrap_token"
    if token.exists() and not (state / "credential").exists():
        command += ["--bootstrap-token-file", str(token)]
    return command


def main() -> None:
    states = sorted(p.parent for p in (VAR / "agents").glob("*/demo.json"))
    if not states:
        raise SystemExit("demo-agents: no var/agents/*/demo.json; run `manage.py demo_data` first")
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    wait_for_server()
    procs: dict[Path, subprocess.Popen[bytes]] = {}
    died: dict[Path, float] = {}
    jobs_submitted = False
    while not stopping:
        for state in states:
            proc = procs.get(state)
            if proc is not None and proc.poll() is None:
                continue
            if proc is not None and state not in died:
                log(f"agent {state.name} exited ({proc.returncode}); restarting in {RESTART_AFTER_S} s")
                died[state] = time.monotonic()
            if proc is None or time.monotonic() - died.get(state, 0) >= RESTART_AFTER_S:
                died.pop(state, None)
                procs[state] = subprocess.Popen(agent_command(state), cwd=ROOT)
                log(f"agent {state.name} started (pid {procs[state].pid})")
        if not jobs_submitted and all((s / "credential").exists() for s in states):
            jobs_submitted = True
            subprocess.run([sys.executable, "manage.py", "demo_data", "-v", "0"], cwd=ROOT, check=False)
            log("every demo node registered; demo jobs submitted")
        time.sleep(1)
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
