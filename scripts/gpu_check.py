#!/usr/bin/env python3
"""End-to-end check on a machine with real NVIDIA GPUs: NVML readings, then the whole platform billing a job.

1. The agent's NVML backend alone: its inventory, then samples while a CUDA program runs on GPU 0 (is the
   program's pid among the GPU's processes, does utilisation and memory rise?).
2. The platform as `make run` starts it (SQLite, the filesystem broker, DEBUG on, a round every 10 s), with one
   real agent (`--backend nvml`) registering this machine under a GPU type named after its model. A tenant
   submits a one-GPU job running the same CUDA program through the API; the script follows it until it ends
   and prints what the platform measured and charged beside what nvidia-smi showed meanwhile. A second job is
   cancelled while its CUDA program runs: it must end cancelled, charged for the time it ran, the GPU's memory
   free again.

It prints one JSON line with the findings and exits 1 if a check failed. The CUDA program needs PyTorch
(`--job-command` gives another). Usage: python3 scripts/gpu_check.py [--out DIR] [--job-seconds N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PORT = 8765  # main() sets it from --port
SERVER = f"http://127.0.0.1:{PORT}"
BACKEND = "nvml"

# A CUDA program: bf16 matrix products for N seconds on the GPU the agent bound (CUDA_VISIBLE_DEVICES).
CUDA_JOB = """
import os, sys, time, torch
seconds = float(sys.argv[1])
print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.get_device_name(0), flush=True)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize(); n += 20
print("products", n, flush=True)
"""


def sh(*args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, env=env, cwd=ROOT).stdout


def smi() -> list[dict[str, str]]:
    if BACKEND == "sim":  # a dry run of the script on a machine without GPUs
        return [{"index": "0", "name": "NVIDIA H200 (simulated)", "utilization.gpu": "?"}]
    fields = "index,uuid,name,utilization.gpu,memory.used,power.draw"
    out = sh("nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    return [
        dict(zip(fields.split(","), (v.strip() for v in line.split(",")), strict=True))
        for line in out.splitlines()
    ]


def backend_check(job: list[str]) -> dict[str, Any]:
    """Step 1: NvmlBackend's inventory, and samples while the CUDA program runs on GPU 0."""
    from nodeagent.agent.nvml import NvmlBackend

    backend = NvmlBackend()
    inventory = backend.inventory()
    idle = backend.sample({})[0]
    proc = subprocess.Popen([*job, "12"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    busy, smi_mem = [], []
    for _ in range(4):
        time.sleep(2.5)
        busy.append(backend.sample({})[0])
        smi_mem.append(float(smi()[0]["memory.used"]))
    proc.wait(timeout=60)
    after = backend.sample({})[0]
    backend.close()
    pids = sorted({p.pid for s in busy for p in s.processes})
    return {
        "inventory": [vars(g) for g in inventory],
        "idle": {"util": idle.util_pct, "mem_mb": idle.mem_used_mb, "power_w": idle.power_w},
        "busy": [
            {
                "util": s.util_pct,
                "mem_mb": s.mem_used_mb,
                "smi_mem_mb": m,
                "power_w": s.power_w,
                "energy_j": s.energy_j,
            }
            for s, m in zip(busy, smi_mem, strict=True)
        ],
        "after": {"util": after.util_pct, "mem_mb": after.mem_used_mb, "processes": len(after.processes)},
        "job_pid": proc.pid,
        "pids_seen": pids,
        "ok": bool(inventory)
        and proc.pid in pids
        and max(s.util_pct for s in busy) > 50
        and busy[-1].energy_j > idle.energy_j
        # memory as nvidia-smi shows it (MiB; it reads a moment apart, so allow a little)
        and abs(busy[-1].mem_used_mb - smi_mem[-1]) < 64,
    }


def api(method: str, path: str, token: str, body: Any = None, key: str = "") -> tuple[int, Any]:
    request = urllib.request.Request(SERVER + path, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, data, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def wait_for_server(timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{SERVER}/healthz", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"gpu_check: no server at {SERVER} after {timeout_s:.0f} s")


def type_name(model: str) -> str:
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", model)  # "NVIDIA H200" -> H200
    return found.group(1) if found else "GPU"


TERMINAL = ("completed", "failed", "cancelled", "expired")


def follow(
    token: str, job_id: int, timeout_s: float, until: Callable[[dict[str, Any]], bool] | None = None
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Poll a job until it ends (or `until` holds); nvidia-smi's reading at each poll while it runs."""
    seen: list[dict[str, str]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        _, detail = api("GET", f"/api/v1/tenants/vision/jobs/{job_id}", token)
        if detail["state"] == "running":
            seen.append(smi()[0])
        if detail["state"] in TERMINAL or (until and until(detail)) or time.monotonic() > deadline:
            return detail, seen
        time.sleep(3)


def platform_check(job: list[str], seconds: int, var: Path, log: Path) -> dict[str, Any]:
    """Step 2: the platform with the real agent; one job submitted, run, measured and billed."""
    env = {
        **os.environ,
        "DEBUG": "1",
        "TLS": "0",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "ROUND_SECONDS": "10",
        "GPUMARKET_VAR_DIR": str(var),
        "PYTHONUNBUFFERED": "1",
    }
    py = sys.executable
    sh(py, "manage.py", "migrate", "--noinput", "-v0", env=env)
    sh(py, "manage.py", "demo_data", "-v0", env=env)
    gpus = smi()
    name = type_name(gpus[0]["name"])
    state = var / "agents" / "gpu-node"
    setup = (
        "from accounts.models import User; from config.money import MICRO; "
        "from inventory.services.gpu_types import gpu_type_save; "
        f"gpu_type_save(name={name!r}, memory_gb=80, reserve_price=2*MICRO, max_price=20*MICRO, "
        "actor=User.objects.get(username='admin'))"
    )
    sh(py, "manage.py", "shell", "-c", setup, env=env)
    sh(py, "manage.py", "node_bootstrap_token", "--name", "gpu-node", "--gpu-type", name, "--as", "admin",
       "--write", str(state / "bootstrap_token"), env=env)  # fmt: skip
    out = log.open("w")
    procs: list[subprocess.Popen[bytes]] = []

    def start(*cmd: str) -> None:
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))

    start(py, "manage.py", "runserver", f"127.0.0.1:{PORT}", "--noreload")
    start(
        py, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "--without-gossip", "--without-mingle"
    )
    start(py, "-m", "celery", "-A", "config", "beat", "-s", str(var / "beat-schedule"))
    wait_for_server()  # the agent's first registration needs the server up
    start(py, "-m", "nodeagent.agent", "--server", SERVER, "--state-dir", str(state), "--backend", BACKEND,
          "--sim-gpus", "1", "--sim-model", gpus[0]["name"], "--name", "gpu-node", "--interval", "2",
          "--bootstrap-token-file", str(state / "bootstrap_token"))  # fmt: skip
    token = (var / "demo_token").read_text().strip()
    body = {
        "name": "gpu-check",
        "command": shlex.join([*job, str(seconds)]),
        "gpus": 1,
        "max_hours": "1",
        "bids": [{"gpu_type": name, "limit": "6"}],
    }
    result: dict[str, Any] = {"gpu_type": name}
    try:
        deadline = time.monotonic() + 120
        while True:  # 400 until the agent has registered the node (no gang of 1 fits any type yet)
            try:
                status, job_json = api("POST", "/api/v1/tenants/vision/jobs", token, body, key="gpu-check")
            except OSError:
                status, job_json = 0, None
            if status == 201 or time.monotonic() > deadline:
                break
            time.sleep(2)
        result["submit_status"] = status
        if status != 201:
            result["submit_error"] = job_json
            return result
        result["job"], result["smi_while_running"] = follow(token, job_json["id"], seconds + 150)
        # A second job, cancelled while its CUDA program runs: the agent stops it (SIGTERM, then SIGKILL after
        # the grace period), the GPU's memory is free again, and the lease is charged for the time it ran.
        long_job = {**body, "name": "gpu-check-cancel", "command": shlex.join([*job, "600"])}
        status, job_json = api("POST", "/api/v1/tenants/vision/jobs", token, long_job, key="gpu-check-cancel")
        cancel_id = job_json["id"]
        follow(
            token,
            cancel_id,
            90,
            until=lambda d: bool(d["leases"] and (d["leases"][0]["usage"] or {}).get("samples", 0) >= 5),
        )
        result["cancel_status"], _ = api("POST", f"/api/v1/tenants/vision/jobs/{cancel_id}/cancel", token)
        result["cancelled_job"], _ = follow(token, cancel_id, 90)
        time.sleep(3)  # the next sample
        result["smi_after_cancel"] = smi()[0]
        _, ledger = api("GET", "/api/v1/tenants/vision/ledger", token)
        result["ledger"] = ledger
        result["nodes"] = sh(py, "manage.py", "node", "list", env=env)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        out.close()
    return result


def _cancel_summary(plat: dict[str, Any]) -> dict[str, Any]:
    job = plat.get("cancelled_job") or {}
    lease = (job.get("leases") or [{}])[0]
    usage = lease.get("usage") or {}
    after = plat.get("smi_after_cancel") or {}
    summary = {
        "state": job.get("state"),
        "end_reason": lease.get("end_reason"),
        "gpu_seconds": usage.get("gpu_seconds"),
        "charged_credits": lease.get("charged_credits"),
        "smi_mem_after_mib": after.get("memory.used"),
    }
    free = BACKEND == "sim" or float(after.get("memory.used") or 1e9) < 64
    summary["ok"] = job.get("state") == "cancelled" and lease.get("charged") is not None and free
    return summary


def _within(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], else the usage line says which."""

    def parse(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be a whole number from {low} to {high}")
        return int(text)

    return parse


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "var/gpu-check"))
    p.add_argument("--job-seconds", type=_within(1, 3600), default=40, help="the job's run time (default 40)")
    p.add_argument("--job-command", help="a CUDA program taking its run time in seconds as last argument")
    p.add_argument("--backend", choices=("nvml", "sim"), default="nvml", help="sim: a dry run without GPUs")
    p.add_argument("--port", type=_within(1024, 65535), default=8765, help="the local server's port (8765)")
    args = p.parse_args()
    global BACKEND, PORT, SERVER
    BACKEND, PORT = args.backend, args.port
    SERVER = f"http://127.0.0.1:{PORT}"
    args.out.mkdir(parents=True, exist_ok=True)
    job = shlex.split(args.job_command) if args.job_command else [sys.executable, "-c", CUDA_JOB]
    findings: dict[str, Any] = {"smi": smi()}
    if BACKEND == "sim":
        job = [sys.executable, "-m", "nodeagent.agent.demo_job", "--seconds"]
        findings["backend"] = {"ok": True, "skipped": "sim"}
    else:
        findings["backend"] = backend_check(job)
    with tempfile.TemporaryDirectory() as var:
        findings["platform"] = platform_check(job, args.job_seconds, Path(var), args.out / "platform.log")
    plat = findings["platform"]
    lease = ((plat.get("job") or {}).get("leases") or [{}])[0]
    usage = lease.get("usage") or {}
    findings["summary"] = {
        "backend_ok": findings["backend"]["ok"],
        "job_state": (plat.get("job") or {}).get("state"),
        "lease_state": lease.get("state"),
        "gpu_seconds": usage.get("gpu_seconds"),
        "util_avg": usage.get("util_avg"),
        "energy_j": usage.get("energy_j"),
        "charged_credits": lease.get("charged_credits"),
        "price_credits": lease.get("price_credits"),
        "cancelled": _cancel_summary(plat),
    }
    (args.out / "findings.json").write_text(json.dumps(findings, indent=2, default=str))
    ok = (
        findings["backend"]["ok"]
        and findings["summary"]["job_state"] == "completed"
        and (usage.get("gpu_seconds") or 0) > 0.5 * args.job_seconds
        and (usage.get("util_avg") or 0) > 20
        and findings["summary"]["cancelled"]["ok"]
    )
    print(json.dumps({"gpu_check": "ok" if ok else "FAILED", **findings["summary"]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
