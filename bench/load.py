"""Load: 200 tenants submitting, amending and cancelling jobs and 100 simulated agents running them, against
gunicorn while rounds clear every 10 s.

Builds a fresh database (BENCH_LOAD_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_load: dropped and re-created) with one GPU type, 200 funded
tenants, each with a member's API token, and one bootstrap token per simulated agent; serves config.wsgi with
gunicorn (sync workers) on loopback. A separate driver process first registers every agent's node through
`POST /api/v1/agent/register` (8 GPUs each), then, after a warm-up, measures a no-op phase
(GET /api/v1/me) as the baseline, then runs the load:

- tenants' actions, each for a random tenant: submit (60%, with an Idempotency-Key, a tenth of them
  retried with the same key), amend the bid of one of its jobs (20%), cancel one (20%). By default they
  arrive open loop, 10 per second (Poisson: 36,000 an hour, 180 per tenant, far above what teams submit),
  sent by --clients threads, each latency counted from the action's scheduled time, so a client that falls
  behind adds its wait (`late_p99_ms` says how far behind they fell). `--tenant-rate 0` is the closed loop:
  each client acts again as soon as it has its answer, which finds what the machine saturates at;
- one thread per agent doing what nodeagent/agent/daemon.py does, on the wire (docs/agent.md): a heartbeat
  every 15 s with the leases it runs, a command poll every --agent-poll seconds (5; `wait=0`: a long poll would
  hold a sync worker), each command acknowledged; a bind is started (`started`) and runs 5-30 s, then exits
  0 with its final counters; a preempt or release ends it (`exited`, stopped_by); a usage report every 10 s
  (the agent's default interval) with a sample per GPU and cumulative counters for every running lease, so leases settle from what was "measured".

Meanwhile this process runs a round tick every second with the market's period set to 10 s (a round clears
every 10 s) and the node check every 15 s. Afterwards every job a 201 named must exist in a state, the ledger
must check, and one JSON line is printed:

    {"bench": "load", "requests": ..., "errors_5xx": ..., "p50_ms": ..., "p99_ms": ..., "rounds": ...,
     "accepted_jobs": ..., "accounted_jobs": ..., "noop_p99_ms": ..., "p99_ratio": ..., ...}

`requests`, `p50_ms` and `p99_ms` count every request of the load phase, tenants' and agents' alike
(`tenant_p99_ms`, `agent_p99_ms` apart). Target (issue 19): no 5xx, every accepted job accounted for,
p99 under 500 ms.

    .venv/bin/python bench/load.py                    # 200 tenants (10 actions/s), 100 agents, 3 workers, 60 s
    .venv/bin/python bench/load.py --tenant-rate 0    # closed loop: 16 clients as fast as answers come
    .venv/bin/python bench/load.py --seconds 30 --clients 8 --agents 50
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path
from api import _request, _serve, _server_env, _stop  # noqa: E402

GPU_TYPE = "H100"
GPU_MODEL = "NVIDIA H100 80GB HBM3"
ROUND_SECONDS = 10
NODE_CHECK_SECONDS = 15
GPUS_PER_NODE = 8
HEARTBEAT_S = 15.0
USAGE_S = 10.0
RUN_S = (5.0, 30.0)  # how long a simulated job runs before it exits 0


def _log(message: str) -> None:
    print(f"bench/load: {message}", file=sys.stderr, flush=True)


def _seed(tenants: int, agents: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Returns (slug, token) per tenant and (node name, bootstrap secret) per agent."""
    from accounts import services as accounts_services
    from accounts.models import Role, User
    from accounts.tokens import token_create
    from market.money import MICRO
    from market.selectors.policy import market_policy
    from market.services.gpu_types import gpu_type_save
    from market.services.ledger import ledger_topup
    from nodeagent.services.registration import bootstrap_token_create

    admin = User.objects.create_user(username="load-admin", is_staff=True)
    h100 = gpu_type_save(
        name=GPU_TYPE, memory_gb=80, reserve_price=2 * MICRO, max_price=20 * MICRO, actor=admin
    )
    nodes = []
    for n in range(agents):
        name = f"load-{n:04d}"
        issued = bootstrap_token_create(
            actor=admin, name=name, gpu_type=h100, topology_domain=f"rack-{n // 32}"
        )
        nodes.append((name, issued.secret))
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
    return out, nodes


def _rounds(stop: threading.Event, counter: list[int], errors: list[str]) -> None:
    """A tick every second, as beat would with ROUND_TICK_SECONDS=1 (a round starts every 10 s), and the
    node check (silent nodes down, idle leases released) every NODE_CHECK_SECONDS, as beat would."""
    from django.db import connection

    from market.services import rounds
    from nodeagent.tasks import nodes_check

    seen: set[int] = set()
    next_check = time.monotonic() + NODE_CHECK_SECONDS
    while not stop.wait(1.0):
        try:
            rnd = rounds.round_tick()
            if time.monotonic() >= next_check:
                next_check += NODE_CHECK_SECONDS
                nodes_check()
        except Exception as exc:  # noqa: BLE001 - reported in the result
            errors.append(repr(exc))
            continue
        if rnd is not None and rnd.pk not in seen:
            seen.add(rnd.pk)
            counter[0] = len(seen)
    connection.close()


# Client side, in its own process (--drive).


class Recorder:
    """Latencies and statuses of one phase, from any number of threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = {"tenant": [], "agent": []}
        self.by_kind: dict[str, list[float]] = {}  # "POST heartbeat" etc.: where the time goes
        self.statuses: dict[int, int] = {}
        self.samples_5xx: list[str] = []
        # Open loop: how late each arrival's first request left against its scheduled time. Its latency is
        # counted from the schedule (began), so a client that falls behind cannot hide the wait.
        self.late: list[float] = []

    def send(
        self,
        conn: http.client.HTTPConnection,
        who: str,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        key: str | None = None,
        began: float | None = None,
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        raw = json.dumps(body).encode() if body is not None else None
        if began is None:
            began = time.perf_counter()
        else:
            with self.lock:
                self.late.append(time.perf_counter() - began)
        status, reply = _request(conn, method, path, raw, headers)
        elapsed = time.perf_counter() - began
        kind = f"{method} {_route(path)}"
        with self.lock:
            self.latencies[who].append(elapsed)
            self.by_kind.setdefault(kind, []).append(elapsed)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status >= 500 and len(self.samples_5xx) < 5:
                self.samples_5xx.append(f"{method} {path} {status} {reply[:300]!r}")
        try:
            return status, json.loads(reply) if reply else None
        except ValueError:
            return status, None

    def failed(self, exc: BaseException) -> None:
        with self.lock:
            self.statuses[-1] = self.statuses.get(-1, 0) + 1
            if len(self.samples_5xx) < 5:
                self.samples_5xx.append(f"connection: {exc!r}")


def _route(path: str) -> str:
    """The path without its ids and query: /api/v1/tenants/t001/jobs/7/bid -> jobs/bid."""
    parts = [p for p in path.split("?")[0].split("/")[3:] if p and not p.isdigit()]
    if parts[:1] == ["tenants"]:
        parts = parts[2:]
    return "/".join(parts)


class Tenants:
    def __init__(self, plan: dict[str, Any], rec: Recorder) -> None:
        self.plan, self.rec = plan, rec
        self.accepted: set[int] = set()
        self.jobs: dict[int, list[int]] = {}  # tenant index -> job ids

    def act(self, conn: http.client.HTTPConnection, rng: random.Random, due: float | None = None) -> None:
        """One action of a random tenant; `due`: its scheduled time (open loop), from which the first
        request's latency counts."""
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
            for attempt in range(2 if rng.random() < 0.1 else 1):  # a retry with the same key and body
                began = due if attempt == 0 else None
                status, reply = self.rec.send(conn, "tenant", "POST", base, token, body, key, began)
                if status == 201 and reply:
                    with self.rec.lock:
                        self.accepted.add(reply["id"])
                        self.jobs.setdefault(t, []).append(reply["id"])
        elif roll < 0.8:
            job = rng.choice(mine)
            limit = f"{rng.uniform(2, 9):.2f}"
            bids = {"bids": [{"gpu_type": GPU_TYPE, "limit": limit}]}
            self.rec.send(conn, "tenant", "POST", f"{base}/{job}/bid", token, bids, began=due)
        else:
            path = f"{base}/{rng.choice(mine)}/cancel"
            self.rec.send(conn, "tenant", "POST", path, token, began=due)


class SimAgent:
    """One node's agent on the wire (docs/agent.md §Protocol), without processes or NVML: a bound job "runs"
    for a few seconds, its counters grow with the wall clock, and it exits 0 unless stopped first."""

    BOOT_EPOCH = 1

    def __init__(self, name: str, credential: str, poll_s: float, rng: random.Random) -> None:
        self.name, self.credential, self.poll_s, self.rng = name, credential, poll_s, rng
        self.last_command = 0
        self.seq = 0
        self.running: dict[int, dict[str, Any]] = {}  # lease -> {"gpus", "started", "ends"}
        self.stats = {"binds": 0, "stops": 0, "exits": 0, "usage_reports": 0, "refused": 0}
        now = time.monotonic()
        # A heartbeat first, as the daemon does after registering; the rest spread over their periods, as
        # machines started at different times would be.
        self.next_heartbeat = now + rng.uniform(0, 2.0)
        self.next_poll = now + rng.uniform(0, poll_s)
        self.next_usage = now + rng.uniform(0, USAGE_S)

    def _send(
        self, conn: http.client.HTTPConnection, rec: Recorder, method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        return rec.send(conn, "agent", method, f"/api/v1/agent/{path}", self.credential, body)

    def _counters(self, lease: int, job: dict[str, Any], now: float) -> dict[str, Any]:
        seconds = max(0.0, now - job["started"])
        return {
            "lease": lease,
            "gpu_seconds": round(seconds * len(job["gpus"]), 3),
            "energy_j": round(seconds * len(job["gpus"]) * 300.0, 1),
            "util_avg": 90.0,
            "util_max": 100.0,
            "mem_avg_mb": 30000.0,
            "mem_max_mb": 31000.0,
            "samples": int(seconds),
        }

    def _samples(self, at: str) -> list[dict[str, Any]]:
        """One sample per GPU, as NVML gives them: busy GPUs with the lease's process, idle ones empty."""
        owner = {gpu: lease for lease, job in self.running.items() for gpu in job["gpus"]}
        out = []
        for g in range(GPUS_PER_NODE):
            uuid_ = f"GPU-{self.name}-{g}"
            lease = owner.get(uuid_)
            out.append(
                {
                    "uuid": uuid_,
                    "at": at,
                    "healthy": True,
                    "util_pct": 95.0 if lease else 0.0,
                    "mem_used_mb": 30000.0 if lease else 0.0,
                    "power_w": 300.0 if lease else 60.0,
                    "energy_j": 1000.0 * self.seq,
                    "processes": [{"pid": 1000 + g, "used_mb": 30000.0, "lease": lease}] if lease else [],
                }
            )
        return out

    def _exit(
        self, conn: http.client.HTTPConnection, rec: Recorder, lease: int, stopped_by: str | None
    ) -> None:
        job = self.running.pop(lease)
        usage = self._counters(lease, job, time.monotonic())
        del usage["lease"]
        body = {"exit_code": 0 if stopped_by is None else None, "signal": None if stopped_by is None else 15}
        body |= {"stopped_by": stopped_by, "usage": usage}
        self._send(conn, rec, "POST", f"leases/{lease}/exited", body)
        self.stats["exits"] += 1

    def _apply(self, conn: http.client.HTTPConnection, rec: Recorder, command: dict[str, Any]) -> None:
        lease, kind, payload = int(command["lease"]), command["kind"], command.get("payload") or {}
        if kind == "bind":
            self._send(conn, rec, "POST", f"commands/{command['id']}/ack", {"result": "applied"})
            self._send(conn, rec, "POST", f"leases/{lease}/started", {})
            now = time.monotonic()
            self.running[lease] = {
                "gpus": list(payload.get("gpus") or []),
                "started": now,
                "ends": now + self.rng.uniform(*RUN_S),
            }
            self.stats["binds"] += 1
        else:  # preempt or release: the "process" is signalled and gone at once
            self._send(conn, rec, "POST", f"commands/{command['id']}/ack", {"result": "applied"})
            self.stats["stops"] += 1
            if lease in self.running:
                self._exit(conn, rec, lease, "preempt" if kind == "preempt" else "release")

    def step(self, conn: http.client.HTTPConnection, rec: Recorder) -> float:
        """Whatever is due; returns the monotonic time of the next duty."""
        now = time.monotonic()
        for lease, job in list(self.running.items()):
            if now >= job["ends"]:
                self._exit(conn, rec, lease, None)
        if now >= self.next_usage:
            self.seq += 1
            leases = [self._counters(lease, job, now) for lease, job in self.running.items()]
            sent_at = _utc_now()
            body = {"boot_epoch": self.BOOT_EPOCH, "seq": self.seq, "sent_at": sent_at, "leases": leases}
            body["gpus"] = self._samples(sent_at)
            status, _ = self._send(conn, rec, "POST", "usage", body)
            if status != 200:
                self.stats["refused"] += 1
            self.stats["usage_reports"] += 1
            self.next_usage = now + USAGE_S
        if now >= self.next_heartbeat:
            body = {"boot_epoch": self.BOOT_EPOCH, "leases": sorted(self.running)}
            self._send(conn, rec, "POST", "heartbeat", body)
            self.next_heartbeat = now + HEARTBEAT_S
        if now >= self.next_poll:
            status, reply = self._send(conn, rec, "GET", f"commands?after={self.last_command}&wait=0")
            for command in (reply or {}).get("commands", []) if status == 200 else []:
                if int(command["id"]) > self.last_command:
                    self._apply(conn, rec, command)
                    self.last_command = int(command["id"])
            self.next_poll = time.monotonic() + self.poll_s
        due = [self.next_usage, self.next_heartbeat, self.next_poll]
        return min(due + [job["ends"] for job in self.running.values()])


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _register(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Each agent's node registered with its bootstrap token, 8 at a time: (name, node credential)."""
    out: list[tuple[str, str] | None] = [None] * len(plan["agents"])
    rec = Recorder()

    def one(i: int) -> None:
        name, secret = plan["agents"][i]
        gpus = [
            {"uuid": f"GPU-{name}-{g}", "index": g, "model": GPU_MODEL, "memory_mb": 81559}
            for g in range(GPUS_PER_NODE)
        ]
        conn = http.client.HTTPConnection("127.0.0.1", plan["port"], timeout=60)
        body = {"name": name, "agent_version": "bench", "gpus": gpus}
        status, reply = rec.send(conn, "agent", "POST", "/api/v1/agent/register", secret, body)
        conn.close()
        if status != 201:
            raise SystemExit(f"bench/load: register {name} answered {status}: {reply!r}")
        out[i] = (name, reply["credential"])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(len(plan["agents"]))))
    return [o for o in out if o is not None]


def _run(
    plan: dict[str, Any],
    seconds: float,
    rec: Recorder,
    tenants: Tenants | None,
    agents: list[SimAgent],
    noop: bool = False,
) -> None:
    deadline = time.perf_counter() + seconds

    rate = 0.0 if noop or tenants is None else float(plan.get("tenant_rate") or 0)
    arrivals: list[float] = []
    if rate:  # open loop: Poisson arrivals at `rate` per second, shared by the client threads
        gen, at = random.Random("arrivals"), time.perf_counter()
        while at < deadline:
            at += gen.expovariate(rate)
            arrivals.append(at)
        arrivals.reverse()  # pop() from the end takes the earliest
    arrivals_lock = threading.Lock()

    def open_client(n: int) -> None:
        assert tenants is not None
        rng = random.Random(n)
        conn = http.client.HTTPConnection("127.0.0.1", plan["port"], timeout=60)
        while True:
            with arrivals_lock:
                if not arrivals or arrivals[-1] >= deadline:
                    break
                due = arrivals.pop()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                tenants.act(conn, rng, due)
            except (OSError, http.client.HTTPException) as exc:
                rec.failed(exc)
                conn.close()
        conn.close()

    def client(n: int) -> None:
        if rate:
            open_client(n)
            return
        rng = random.Random(n)
        conn = http.client.HTTPConnection("127.0.0.1", plan["port"], timeout=60)
        while time.perf_counter() < deadline:
            try:
                if noop or tenants is None:
                    token = plan["tenants"][n % len(plan["tenants"])][1]
                    rec.send(conn, "tenant", "GET", "/api/v1/me", token)
                else:
                    tenants.act(conn, rng)
            except (OSError, http.client.HTTPException) as exc:
                rec.failed(exc)
                conn.close()
        conn.close()

    def agent(a: SimAgent) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", plan["port"], timeout=60)
        while True:
            try:
                due = a.step(conn, rec)
            except (OSError, http.client.HTTPException) as exc:
                rec.failed(exc)
                conn.close()
                due = time.monotonic() + 1.0
            wait = due - time.monotonic()
            if time.perf_counter() + max(0.0, wait) >= deadline:
                break
            if wait > 0:
                time.sleep(wait)
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(plan["clients"])]
    threads += [threading.Thread(target=agent, args=(a,)) for a in agents]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def _drive(plan: dict[str, Any]) -> dict[str, Any]:
    registered = _register(plan)
    _run(plan, plan["baseline_s"], Recorder(), None, [], noop=True)  # warm-up: imports, connections, URLs
    baseline = Recorder()
    _run(plan, plan["baseline_s"], baseline, None, [], noop=True)
    rec = Recorder()
    tenants = Tenants(plan, rec)
    agents = [
        SimAgent(name, credential, plan["agent_poll_s"], random.Random(f"agent-{name}"))
        for name, credential in registered
    ]
    _run(plan, plan["seconds"], rec, tenants, agents)
    everything = rec.latencies["tenant"] + rec.latencies["agent"]
    totals = {
        k: sum(a.stats[k] for a in agents) for k in ("binds", "stops", "exits", "usage_reports", "refused")
    }
    return {
        "requests": len(everything),
        "agent_requests": len(rec.latencies["agent"]),
        "statuses": rec.statuses,
        "p50_ms": _pct(everything, 0.50),
        "p99_ms": _pct(everything, 0.99),
        "tenant_p99_ms": _pct(rec.latencies["tenant"], 0.99),
        "agent_p99_ms": _pct(rec.latencies["agent"], 0.99),
        "noop_p99_ms": _pct(baseline.latencies["tenant"], 0.99),
        "late_p99_ms": _pct(rec.late, 0.99),
        "accepted": sorted(tenants.accepted),
        "agents": totals,
        "by_kind": {
            kind: [len(values), round(_pct(values, 0.5), 1), round(_pct(values, 0.99), 1)]
            for kind, values in sorted(rec.by_kind.items())
        },
        "samples_5xx": rec.samples_5xx,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--agents", type=int, default=100, help="simulated agents, one node of 8 GPUs each")
    parser.add_argument("--agent-poll", type=float, default=5.0, help="seconds between an agent's polls (5)")
    parser.add_argument(
        "--clients", type=int, default=16, help="concurrent tenant client threads (default 16)"
    )
    parser.add_argument(
        "--tenant-rate",
        type=float,
        default=10.0,
        help="open loop: tenants' actions arrive at this many per second (Poisson; default 10), served by "
        "--clients threads, each latency counted from its scheduled arrival; 0: closed loop, each client "
        "acting again as soon as its last answer came (what the machine saturates at)",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load (default 60)")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn sync workers (default 3)")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        print(json.dumps(_drive(json.load(sys.stdin))))
        return
    if args.tenant_rate < 0:
        parser.error("--tenant-rate: must be 0 (closed loop) or a rate above 0")
    if args.agents < 1 or args.tenants < 1 or args.clients < 1 or args.workers < 1 or args.agent_poll <= 0:
        parser.error("--agents, --tenants, --clients and --workers must be at least 1, --agent-poll above 0")
    url = os.environ.get("BENCH_LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_load")
    fresh_database(url)
    os.environ.update(_server_env(url))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    tenants, agents = _seed(args.tenants, args.agents)
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE")
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
        plan = {"port": port, "tenants": tenants, "agents": agents, "clients": args.clients}
        plan |= {"seconds": args.seconds, "baseline_s": 3.0, "agent_poll_s": args.agent_poll}
        plan |= {"tenant_rate": args.tenant_rate}
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
    from market.models import EndReason, Job, Lease, LeaseState
    from market.selectors.ledger import ledger_problems

    accounted = Job.objects.filter(pk__in=result["accepted"]).exclude(state="").count()
    settled = Lease.objects.filter(state=LeaseState.ENDED, charged__isnull=False).count()
    # Nodes declared lost (heartbeat older than NODE_DOWN_SECONDS): their leases settled for what was reported.
    lost = Lease.objects.filter(end_reason=EndReason.NODE_LOST).count()
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
                "tenant_p99_ms": round(result["tenant_p99_ms"], 1),
                "agent_p99_ms": round(result["agent_p99_ms"], 1),
                "agent_requests": result["agent_requests"],
                "leases_settled": settled,
                "leases_node_lost": lost,
                "agent_events": result["agents"],
                "by_kind": result["by_kind"],  # [requests, p50_ms, p99_ms]
                "statuses": result["statuses"],
                "round_errors": len(round_errors),
                "ledger_ok": ledger_problems() == [],
                "tenants": args.tenants,
                "agents": args.agents,
                "clients": args.clients,
                "tenant_rate": args.tenant_rate or None,
                "late_p99_ms": round(result["late_p99_ms"], 1),
                "requests_per_s": round(result["requests"] / args.seconds, 1),
                "workers": args.workers,
                "seconds": args.seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
