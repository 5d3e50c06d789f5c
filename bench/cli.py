"""The command line's cold start: `gpumarket --help` and `gpumarket jobs --json` against a local server.

Each run is a fresh process, as a user's command is: the interpreter starts, imports what the command needs
and exits. `--help` imports click and the command table only (gpumarket_client.cli loads each command's
module when that command runs, and httpx and rich only where a command uses them); `jobs --json` also pays
for httpx, one request to the server and its answer. The server is gunicorn on a fresh database seeded as
bench/api.py seeds it (BENCH_CLI_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/gpumarket_bench_cli:
dropped and re-created), with 20 jobs in the team's list. `python -c pass` is the floor no command can go
under. Prints one JSON line: {"bench": "cli", "help_ms": median, ...}. Target (issue 37): --help under 300 ms.

    .venv/bin/python bench/cli.py              # 15 runs of each
    .venv/bin/python bench/cli.py --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# bench/api.py's server: the same seed and the same gunicorn on a bound socket.
from api import SLUG, _prepare, _serve, _stop, _wait_ready  # noqa: E402 - bench/ is the script's folder

GPUMARKET = str(Path(sys.executable).parent / "gpumarket")
JOBS = 20
TARGET_HELP_MS = 300


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"bench/cli: {' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": round(statistics.median(ordered), 1),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
    }


def _seed_jobs(url: str, token: str) -> None:
    import httpx

    body = {
        "name": "bench",
        "command": "sleep 1",
        "gpus": 1,
        "max_hours": "1",
        "bids": [{"gpu_type": "H100", "limit": "3"}],
    }
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        for i in range(JOBS):
            response = http.post(
                f"/api/v1/tenants/{SLUG}/jobs", json=body, headers={"Idempotency-Key": f"bench-{i}"}
            )
            response.raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    db = os.environ.get("BENCH_CLI_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_cli")
    token = _prepare(db, nodes=4)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _serve(sock, workers=2)
    try:
        _wait_ready(server, port, token)
        url = f"http://127.0.0.1:{port}"
        _seed_jobs(url, token)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMARKET_")}
        env |= {"GPUMARKET_URL": url, "GPUMARKET_TOKEN": token, "GPUMARKET_TENANT": SLUG}
        floor, helps, jobs = [], [], []
        for _ in range(args.runs):  # interleaved, so drift on a shared machine falls on each alike
            floor.append(_timed([sys.executable, "-c", "pass"], env))
            helps.append(_timed([GPUMARKET, "--help"], env))
            jobs.append(_timed([GPUMARKET, "jobs", "--json"], env))
    finally:
        _stop(server)
        sock.close()
    help_ms, jobs_ms, python_ms = _figures(helps), _figures(jobs), _figures(floor)
    print(
        json.dumps(
            {
                "bench": "cli",
                "help_ms": help_ms["median"],
                "help_p90_ms": help_ms["p90"],
                "jobs_json_ms": jobs_ms["median"],
                "jobs_json_p90_ms": jobs_ms["p90"],
                "python_floor_ms": python_ms["median"],
                "jobs_listed": JOBS,
                "runs": args.runs,
                "target_help_ms": TARGET_HELP_MS,
                "help_within_target": help_ms["median"] < TARGET_HELP_MS,
                "load": round(os.getloadavg()[0], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
