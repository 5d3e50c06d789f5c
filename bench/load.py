"""Load: 200 tenants submitting, amending and cancelling jobs against gunicorn while rounds clear every 10 s.

Builds a fresh database (BENCH_LOAD_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_load: dropped and re-created) with one GPU type on nodes of
8 GPUs and 200 funded tenants, each with a member's API token; serves config.wsgi with gunicorn (sync
workers) on loopback; drives it from a separate process of client threads, each acting for a random tenant:
submit (60%, with an Idempotency-Key, a tenth of them retried with the same key), amend the bid of one of
its jobs (20%), cancel one (20%). Meanwhile this process runs a round tick every second with the market's
period set to 10 s, so a round clears every 10 s, and a short no-op phase (GET /api/v1/me) measured first,
after a warm-up, gives the baseline. Afterwards every job a 201 named must exist in a state, the ledger must check, and one
JSON line is printed:

    {"bench": "load", "requests": ..., "errors_5xx": ..., "p50_ms": ..., "p99_ms": ..., "rounds": ...,
     "accepted_jobs": ..., "accounted_jobs": ..., "noop_p99_ms": ..., "p99_ratio": ..., ...}

Target (issue 19): no 5xx, every accepted job accounted for, p99 under 500 ms. The agents' part (100 nodes
heartbeating and reporting usage) waits for the agent endpoints (/api/v1/agent/), which are not on main yet.

    .venv/bin/python bench/load.py                    # 200 tenants, 16 clients, 60 s
    .venv/bin/python bench/load.py --seconds 30 --clients 8
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path
from api import _request, _serve, _server_env, _stop  # noqa: E402

GPU_TYPE = "H100"
ROUND_SECONDS = 10


def _log(message: str) -> None:
    print(f"bench/load: {message}", file=sys.stderr, flush=True)


def _seed(tenants: int, nodes: int) -> list[tuple[str, str]]:
    """Returns (slug, token) per tenant."""
    from accounts import services as accounts_services
    from accounts.models import Role, User
    from accounts.tokens import token_create
    from market.money import MICRO
    from market.selectors.policy import market_policy
    from market.services.gpu_types import gpu_type_save
    from market.services.ledger import ledger_topup
    from nodeagent.models import Gpu, Node

    admin = User.objects.create_user(username="load-admin", is_staff=True)
    h100 = gpu_type_save(
        name=GPU_TYPE, memory_gb=80, reserve_price=2 * MICRO, max_price=20 * MICRO, actor=admin
    )
    made = Node.objects.bulk_create(
        Node(name=f"load-{n:04d}", gpu_type=h100, topology_domain=f"rack-{n // 32}") for n in range(nodes)
    )
    Gpu.objects.bulk_create(Gpu(node=n, index=i, uuid=f"GPU-{n.name}-{i}") for n in made for i in range(8))
    policy = market_policy()
    policy.round_seconds = ROUND_SECONDS
    policy.save()
    out = []
    for t in range(tenants):
        tenant = accounts_services.tenant_create(name=f"Load {t}", slug=f"t{t:03d}", actor=admin)
        member = User.objects.create_user(username=f"load-{t:03d}")
        accounts_services.membership_set(tenant=tenant, user=member, role=Role.MEMBER, actor=admin)
        ledger_topup(tenant=tenant, amount=10_000 * MICRO, key="load", actor=admin)
        out.append((tenant.slug, token_create(user=member, tenant=tenant, name="load").secret))
    return out


def _rounds(stop: threading.Event, counter: list[int], errors: list[str]) -> None:
    """A tick every second, as beat would with ROUND_TICK_SECONDS=1; a round starts every 10 s."""
    from django.db import connection

    from market.services import rounds

    seen: set[int] = set()
    while not stop.wait(1.0):
        try:
            rnd = rounds.round_tick()
        except Exception as exc:  # noqa: BLE001 - reported in the result
            errors.append(repr(exc))
            continue
        if rnd is not None and rnd.pk not in seen:
            seen.add(rnd.pk)
            counter[0] = len(seen)
    connection.close()


# Client side, in its own process (--drive).


class Driver:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.accepted: set[int] = set()
        self.samples_5xx: list[str] = []
        self.jobs: dict[int, list[int]] = {}  # tenant index -> job ids

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        key: str | None = None,
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        raw = json.dumps(body).encode() if body is not None else None
        began = time.perf_counter()
        status, reply = _request(conn, method, path, raw, headers)
        elapsed = time.perf_counter() - began
        with self.lock:
            self.latencies.append(elapsed)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status >= 500 and len(self.samples_5xx) < 5:
                self.samples_5xx.append(f"{method} {path} {status} {reply[:300]!r}")
        try:
            return status, json.loads(reply) if reply else None
        except ValueError:
            return status, None

    def act(self, conn: http.client.HTTPConnection, rng: random.Random) -> None:
        t = rng.randrange(len(self.plan["tenants"]))
        slug, token = self.plan["tenants"][t]
        base = f"/api/v1/tenants/{slug}/jobs"
        roll = rng.random()
        mine = self.jobs.get(t) or []
        if roll < 0.6 or not mine:
            key = f"load-{uuid.uuid4()}"
            body = {
                "name": f"load {key[-6:]}",
                "command": "python train.py",
                "gpus": rng.choice([1, 1, 1, 2, 4]),
                "max_hours": rng.choice(["0.5", "1", "2"]),
                "bids": [{"gpu_type": GPU_TYPE, "limit": f"{rng.uniform(2, 8):.2f}"}],
            }
            for _ in range(2 if rng.random() < 0.1 else 1):  # a retry with the same key and body
                status, reply = self._send(conn, "POST", base, token, body, key)
                if status == 201 and reply:
                    with self.lock:
                        self.accepted.add(reply["id"])
                        self.jobs.setdefault(t, []).append(reply["id"])
        elif roll < 0.8:
            job = rng.choice(mine)
            limit = f"{rng.uniform(2, 9):.2f}"
            self._send(
                conn, "POST", f"{base}/{job}/bid", token, {"bids": [{"gpu_type": GPU_TYPE, "limit": limit}]}
            )
        else:
            self._send(conn, "POST", f"{base}/{rng.choice(mine)}/cancel", token)

    def run(self, seconds: float, noop: bool = False) -> None:
        deadline = time.perf_counter() + seconds

        def client(n: int) -> None:
            rng = random.Random(n)
            conn = http.client.HTTPConnection("127.0.0.1", self.plan["port"], timeout=60)
            while time.perf_counter() < deadline:
                try:
                    if noop:
                        self._send(conn, "GET", "/api/v1/me", self.plan["tenants"][n % 200][1])
                    else:
                        self.act(conn, rng)
                except (OSError, http.client.HTTPException) as exc:
                    with self.lock:
                        self.statuses[-1] = self.statuses.get(-1, 0) + 1
                        self.samples_5xx.append(f"connection: {exc!r}")
                    conn.close()
            conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(self.plan["clients"])]
        for th in threads:
            th.start()
        for th in threads:
            th.join()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def _drive(plan: dict[str, Any]) -> dict[str, Any]:
    Driver(plan).run(plan["baseline_s"], noop=True)  # warm-up: workers import, connect, build their URLs
    baseline = Driver(plan)
    baseline.run(plan["baseline_s"], noop=True)
    driver = Driver(plan)
    driver.run(plan["seconds"])
    return {
        "requests": len(driver.latencies),
        "statuses": driver.statuses,
        "p50_ms": _pct(driver.latencies, 0.50),
        "p99_ms": _pct(driver.latencies, 0.99),
        "noop_p99_ms": _pct(baseline.latencies, 0.99),
        "accepted": sorted(driver.accepted),
        "samples_5xx": driver.samples_5xx,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16, help="concurrent client threads (default 16)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load (default 60)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn sync workers (default 2)")
    parser.add_argument("--nodes", type=int, default=25, help="nodes of 8 GPUs (default 25)")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        print(json.dumps(_drive(json.load(sys.stdin))))
        return
    url = os.environ.get("BENCH_LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_load")
    fresh_database(url)
    os.environ.update(_server_env(url))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    tenants = _seed(args.tenants, args.nodes)
    connections.close_all()
    stop, rounds_done, round_errors = threading.Event(), [0], []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(256)
        port = sock.getsockname()[1]
        server = _serve(sock, args.workers)
    ticker = threading.Thread(target=_rounds, args=(stop, rounds_done, round_errors))
    try:
        time.sleep(3)  # gunicorn's workers start
        ticker.start()
        plan = {"port": port, "tenants": tenants, "clients": args.clients, "seconds": args.seconds}
        plan["baseline_s"] = 3.0
        cmd = [sys.executable, str(Path(__file__).resolve()), "--drive"]
        done = subprocess.run(cmd, input=json.dumps(plan), capture_output=True, text=True, check=False)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"bench/load: the driver failed ({done.returncode})")
        result = json.loads(done.stdout)
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join(60)
        _stop(server)
    from market.models import Job
    from market.selectors.ledger import ledger_problems

    accounted = Job.objects.filter(pk__in=result["accepted"]).exclude(state="").count()
    errors_5xx = sum(n for code, n in result["statuses"].items() if int(code) >= 500 or int(code) < 0)
    for sample in result["samples_5xx"]:
        _log(f"5xx: {sample}")
    for error in round_errors[:5]:
        _log(f"round error: {error}")
    print(
        json.dumps(
            {
                "bench": "load",
                "requests": result["requests"],
                "errors_5xx": errors_5xx,
                "p50_ms": round(result["p50_ms"], 1),
                "p99_ms": round(result["p99_ms"], 1),
                "rounds": rounds_done[0],
                "accepted_jobs": len(result["accepted"]),
                "accounted_jobs": accounted,
                "noop_p99_ms": round(result["noop_p99_ms"], 1),
                "p99_ratio": round(result["p99_ms"] / max(result["noop_p99_ms"], 0.001), 2),
                "statuses": result["statuses"],
                "round_errors": len(round_errors),
                "ledger_ok": ledger_problems() == [],
                "tenants": args.tenants,
                "agents": 0,
                "clients": args.clients,
                "workers": args.workers,
                "seconds": args.seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
