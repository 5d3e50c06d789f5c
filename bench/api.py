"""The API under gunicorn: job submits against an authenticated no-op, same server, same run.

Builds a fresh database (BENCH_API_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_api: dropped and re-created), seeds it through the services
(a GPU type, nodes of 8 GPUs, a funded tenant, its manager and an API token), serves config.wsgi with
gunicorn on a free loopback port and drives it from a separate process of concurrent http.client threads.
Phases alternate no-op, submit, submit, no-op, ... so drift on a shared machine falls on both alike. Prints
one JSON line: {"bench": "api", "submit_per_s": ..., "noop_per_s": ..., "ratio": submit/noop, ...}.
Target (issue 4): ratio at least 0.3, a submit costing at most about three no-op requests.

The no-op is `GET /api/v1/me` with the bearer token: authentication and two small reads, about the least an
authenticated request does. A submit is `POST /api/v1/tenants/<slug>/jobs` with a fresh Idempotency-Key, so
it takes the idempotent path clients are told to use. Workers are gunicorn's default sync ones, the usual
choice behind a buffering proxy: one request at a time per process (two workers on two cores), the
connection closed after each response, a connect the no-op pays too; gthread would add keep-alive but
share each worker's GIL among its threads. The per-user rate limit is raised (API_THROTTLE_USER) so the
bench measures the application, not the limiter; ANALYZE after seeding gives the plans autovacuum soon would.

    .venv/bin/python bench/api.py                        # 8 clients, 3 x (no-op, submit) phases of 2 s
    .venv/bin/python bench/api.py --clients 16 --seconds 5
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
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

SLUG = "bench"
GPU_TYPE = "H100"
STARTUP_S = 30.0


def _log(message: str) -> None:
    print(f"bench/api: {message}", file=sys.stderr, flush=True)


# Server side: database, seed, gunicorn.


def _seed(nodes: int) -> str:
    """A GPU type on nodes of 8 GPUs (racks of 32), a funded tenant with a manager; returns its API token."""
    from accounts import services as accounts_services
    from accounts.models import Role, User
    from accounts.tokens import token_create
    from config.money import MICRO
    from inventory.models import Gpu, Node
    from inventory.services.gpu_types import gpu_type_save
    from market.services.ledger import ledger_topup

    admin = User.objects.create_user(username="bench-admin", is_staff=True)
    h100 = gpu_type_save(
        name=GPU_TYPE, memory_gb=80, reserve_price=2 * MICRO, max_price=20 * MICRO, actor=admin
    )
    made = Node.objects.bulk_create(
        Node(name=f"bench-{n:04d}", gpu_type=h100, topology_domain=f"rack-{n // 32}") for n in range(nodes)
    )
    Gpu.objects.bulk_create(Gpu(node=n, index=i, uuid=f"GPU-{n.name}-{i}") for n in made for i in range(8))
    tenant = accounts_services.tenant_create(name="Bench", slug=SLUG, actor=admin)
    manager = User.objects.create_user(username="bench-manager")
    accounts_services.membership_set(tenant=tenant, user=manager, role=Role.MANAGER, actor=admin)
    ledger_topup(tenant=tenant, amount=10**6 * MICRO, key="bench-topup", actor=admin, memo="bench budget")
    return token_create(user=manager, tenant=tenant, name="bench").secret


def _prepare(url: str, nodes: int) -> str:
    fresh_database(url)
    os.environ.update(_server_env(url))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    secret = _seed(nodes)
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE")
    connections.close_all()
    return secret


def _server_env(url: str) -> dict[str, str]:
    """Production settings over loopback: DEBUG off (no query log), plain HTTP, quiet logs."""
    return {
        "DATABASE_URL": url,
        "DEBUG": "0",
        "TLS": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-only-not-secret",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL") or "WARNING",
        "API_THROTTLE_USER": os.environ.get("API_THROTTLE_USER") or "1000000/s",
    }


def _serve(sock: socket.socket, workers: int) -> subprocess.Popen[bytes]:
    """gunicorn on an already bound socket (fd://), so no other process can take the port in between."""
    fd = sock.fileno()
    cmd = [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"fd://{fd}"]
    cmd += ["--workers", str(workers), "--worker-class", "sync", "--log-level", "warning"]
    return subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), pass_fds=[fd], stdout=sys.stderr)


def _wait_ready(server: subprocess.Popen[bytes], port: int, token: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"bench/api: gunicorn exited with {server.returncode} before answering")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            status, body = _request(conn, *_noop(token))
        except OSError:
            time.sleep(0.1)
            continue
        finally:
            conn.close()
        if status != 200:
            raise SystemExit(f"bench/api: GET /api/v1/me answered {status}: {body[:2000]!r}")
        return
    raise SystemExit(f"bench/api: gunicorn did not answer within {STARTUP_S:.0f} s")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# Client side: runs in its own process (--drive), reads its plan as JSON on stdin.


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def _noop(token: str) -> tuple[str, str, None, dict[str, str]]:
    return "GET", "/api/v1/me", None, {"Authorization": f"Bearer {token}"}


def _submit(token: str, key: str) -> tuple[str, str, bytes, dict[str, str]]:
    body = {
        "name": f"bench {key}",
        "command": "python train.py --epochs 90",
        "gpus": 2,
        "max_hours": "2.5",
        "bids": [{"gpu_type": GPU_TYPE, "limit": "6.5"}],
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }
    return "POST", f"/api/v1/tenants/{SLUG}/jobs", json.dumps(body).encode(), headers


class Driver:
    """Client threads that run each phase together: every thread sends one kind of request until the
    phase's deadline, and the phase lasts until the last of them has its reply."""

    WANT = {"noop": 200, "submit": 201}

    def __init__(self, port: int, token: str, clients: int) -> None:
        self.port, self.token, self.clients = port, token, clients
        self.failure: str | None = None
        self.failures = 0
        self._lock = threading.Lock()

    def phase(self, kind: str, seconds: float) -> tuple[int, float, list[float]]:
        """(replies, elapsed seconds, latencies) for `clients` threads sending `kind` for `seconds`."""
        start = time.perf_counter()
        deadline = start + seconds
        results: list[list[float]] = [[] for _ in range(self.clients)]
        threads = [
            threading.Thread(target=self._client, args=(kind, deadline, results[n]))
            for n in range(self.clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        latencies = [x for r in results for x in r]
        return len(latencies), time.perf_counter() - start, latencies

    def _client(self, kind: str, deadline: float, latencies: list[float]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while self.failure is None and time.perf_counter() < deadline:
            args = _noop(self.token) if kind == "noop" else _submit(self.token, f"bench-{uuid.uuid4()}")
            began = time.perf_counter()
            try:
                status, body = _request(conn, *args)
            except (OSError, http.client.HTTPException) as exc:
                self._fail(f"{args[0]} {args[1]}: {exc!r}")
                conn.close()
                continue
            if status != self.WANT[kind]:
                self._fail(f"{args[0]} {args[1]} answered {status}: {body[:2000].decode(errors='replace')}")
                continue
            latencies.append(time.perf_counter() - began)
        conn.close()

    def _fail(self, message: str) -> None:
        with self._lock:
            self.failures += 1
            if self.failure is None:
                self.failure = message


def _schedule(plan: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """(kind, seconds, measured) phases: a warm-up of each kind (workers build their URL resolver and open
    their database connection on first use), then no-op, submit, submit, no-op, ... so that a linear drift
    hits both kinds alike."""
    phases = [(kind, plan["warmup"], False) for kind in ("noop", "submit")]
    order = ["noop", "submit"]
    for _ in range(plan["rounds"]):
        phases += [(kind, plan["seconds"], True) for kind in order]
        order.reverse()
    return phases


def _drive(plan: dict[str, Any]) -> dict[str, Any]:
    driver = Driver(plan["port"], plan["token"], plan["clients"])
    seconds = dict.fromkeys(Driver.WANT, 0.0)
    latencies: dict[str, list[float]] = {kind: [] for kind in Driver.WANT}
    for kind, length, measured in _schedule(plan):
        replies, elapsed, times = driver.phase(kind, length)
        if driver.failure is not None:
            return {"failures": driver.failures, "first_failure": driver.failure}
        if measured:
            seconds[kind] += elapsed
            latencies[kind] += times
            _log(f"{kind}: {replies / elapsed:.1f}/s over {elapsed:.2f} s")
    return {
        kind: {"requests": len(lat), "seconds": seconds[kind], "p50_ms": statistics.median(lat) * 1000}
        for kind, lat in latencies.items()
    }


def _run_driver(plan: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--drive"]
    done = subprocess.run(cmd, input=json.dumps(plan), capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"bench/api: the driver failed ({done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout)
    if "failures" in result:
        raise SystemExit(
            f"bench/api: {result['failures']} request(s) failed; first: {result['first_failure']}"
        )
    return result


def _report(result: dict[str, Any], clients: int, workers: int) -> dict[str, Any]:
    rate = {kind: r["requests"] / r["seconds"] for kind, r in result.items()}
    return {
        "bench": "api",
        "submit_per_s": round(rate["submit"], 1),
        "noop_per_s": round(rate["noop"], 1),
        "ratio": round(rate["submit"] / rate["noop"], 3),
        "clients": clients,
        "workers": workers,
        "requests": {kind: r["requests"] for kind, r in result.items()},
        "submit_p50_ms": round(result["submit"]["p50_ms"], 1),
        "noop_p50_ms": round(result["noop"]["p50_ms"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one phase (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="(no-op, submit) phase pairs (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds of each kind first")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn sync workers (default 2)")
    parser.add_argument("--nodes", type=int, default=4, help="nodes of 8 GPUs (default 4)")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.clients, args.seconds, args.rounds, args.workers) <= 0:
        parser.error("--clients, --seconds, --rounds and --workers must be positive")
    if args.drive:
        print(json.dumps(_drive(json.load(sys.stdin))))
        return
    url = os.environ.get("BENCH_API_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_api")
    token = _prepare(url, args.nodes)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        server = _serve(sock, args.workers)
    try:
        _wait_ready(server, port, token)
        _log(f"gunicorn ({args.workers} sync workers) on 127.0.0.1:{port}; {args.clients} clients")
        plan = {"port": port, "token": token, "clients": args.clients, "seconds": args.seconds}
        plan |= {"rounds": args.rounds, "warmup": args.warmup}
        result = _run_driver(plan)
    finally:
        _stop(server)
    print(json.dumps(_report(result, args.clients, args.workers)))


if __name__ == "__main__":
    main()
