"""Load: 1,000 node agents long-polling for commands as the real agent does, beside 200 tenants submitting,
amending and cancelling jobs at 10 actions per second, against the shipped web server while rounds clear
every 10 s.

Builds a fresh database (BENCH_LOAD_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_load: dropped and re-created) with one GPU type, 200 funded
tenants, each with a member's API token, and one bootstrap token per agent; serves it with the shipped
settings (gunicorn -c config/gunicorn.py config.asgi: uvicorn workers, as many as the machine's cores, at
least 2; PROMETHEUS_MULTIPROC_DIR set, as the systemd unit does) on loopback, with Redis at
BENCH_LOAD_REDIS_URL (default redis://127.0.0.1:6379/0) waking the polls. A separate driver process first
registers every agent's node through `POST /api/v1/agent/register` (8 GPUs each), measures a no-op phase
(GET /api/v1/me) as the baseline, then starts the agents over RAMP_S seconds and runs the load:

- the agents, on one asyncio event loop (aiohttp, one connection per request as the agent's urllib makes
  them). Protocol 2 (the default; ReportingAgent): a sample every 10 s kept, one gzipped `POST report` with
  every sample since, the acknowledgements, starts and exits at the interval the server's last answer gave
  (fleet pacing: 20 s at 1,000 nodes), at once after a job ended or a bind; the command poll in a task of its
  own, held 75-100% of the server's poll_seconds (240); agents start over RAMP_V2_S (30 s). `--protocol 1`
  (LongPollAgent), each on the first protocol's schedule of nodeagent/agent/daemon.py: a usage report every 10 s with a sample per GPU
  and the counters of every running lease, a heartbeat every 15 s with the leases it runs, and in between
  one long poll `GET commands?after=&wait=` whose wait runs to the next sample or heartbeat (at most the
  server's poll_seconds, 20, and 25: with the 10 s sample, about one poll per 10 s, each held up to 10 s);
  each command acknowledged at once; a bind "runs" 5-30 s (`started`, then exits 0 once its final report
  is acknowledged), a preempt or release ends it; errors back off 1 s doubling as the daemon does;
- tenants' actions, each for a random tenant, in client threads as before: submit (60%, with an
  Idempotency-Key, a tenth of them retried with the same key), amend the bid of one of its jobs (20%),
  cancel one (20%); open loop, 10 per second (Poisson), each latency counted from the action's scheduled
  time (`late_p99_ms` says how far behind the clients fell). `--tenant-rate 0` is the closed loop.

Meanwhile this process runs a round tick every second with the market's period set to 10 s and the node
check every 15 s. Only requests that start inside the measured window (after the ramp) count. Latencies:
`tenant_*` for tenants, `agent_*` for every agent call but the polls that waited, whose time is reported
apart as held (`held_p50_s`, `polls_woken`: answered with a command before the wait ran out). Delivery:
each command's delay from its row's created_at (for a round's binds, the start of the round's commit) to its
agent receiving it; `delivery_after_commit_p99_ms` from the end of the round's commit instead. Accounting:
every job a 201 named must exist (`accounted_jobs`), every usage report acknowledged must be stored
(`usage_accounted` = `usage_acked`), and the ledger must check. `cpu_s` says where the machine's time went
in the window (server workers, PostgreSQL, Redis, the driver, the round ticker). One JSON line:

    {"bench": "load", "errors_5xx": ..., "tenant_p99_ms": ..., "agent_p99_ms": ..., "delivery_p99_ms": ...,
     "noop_p99_ms": ..., "p99_ratio": tenant p99 / no-op p99, "accepted_jobs": ..., "accounted_jobs": ...,
     "usage_acked": ..., "usage_accounted": ..., "polls_waiting_mid": ..., "by_kind": ..., "cpu_s": ...}

Targets (issue 29), 1,000 agents on a 2-core machine: tenant p99 under 300 ms, no 5xx, command delivery
p99 under 2 s, everything accounted for.

A property checked on every run (issue 38): no request is answered 500 (`errors_500`; the run exits 1 after
its line otherwise). `deadlocks` counts those PostgreSQL detected in the bench database during the run and
`db_conflicts` what the retry net (config/dbretry.py) did with them: retried, recovered, gave_up (a 503).

    .venv/bin/python bench/load.py                       # 1,000 agents, 200 tenants at 10/s, 60 s
    .venv/bin/python bench/load.py --agents 100          # the same with 100 agents (scaling)
    .venv/bin/python bench/load.py --server wsgi-sync    # the sync workers shipped before, to compare

Figures on the shared 2-core development machine, 2026-11-27, other engineers' work running beside (load
average in brackets; docs/deploy.md §Fleet traffic has the table and what it says):

    bench/load.py --agents 100 --server wsgi-sync [4.9]: tenant p50 44 s, p99 71 s; 479 timeouts; no command
        delivered (the old sync workers, each held by a waiting poll)
    bench/load.py --agents 100 [6.4]: tenant p50 58 ms, p99 478 ms; agent p50 93 ms, p99 783 ms; 0 5xx;
        delivery p50 0.94 s, p99 5.2 s; 472/472 jobs and 736/736 reports accounted for
    bench/load.py --agents 100 --seconds 30 [4.0]: tenant p99 256 ms, agent p99 474 ms, delivery p99 2.7 s
    bench/load.py --agents 300 [10.2]: tenant p99 889 ms; agent p50 2.2 s, p99 4.5 s; 0 5xx
    bench/load.py [9.1] (1,000 agents): tenant p50 156 ms, p99 762 ms; 3,425 agents' requests turned away
        with 503 (config/slots.py), the others at the 5 s queue limit; delivery p99 48 s; 475/475 jobs and
        3,865/3,865 reports accounted for; the web workers had about one core of the machine's two

1,000 agents offer about 340 requests a second at about 8 ms of web CPU each here: more than the machine.

Protocol 2, 2026-11-29, the same shared machine (docs/deploy.md §Fleet traffic, Protocol 2, has the table):

    bench/load.py --agents 200 --tenant-rate 0.2 [4.7]: 0 5xx; agent p50 44 ms, p99 155 ms; 1,597/1,597
        reports; 16.5 ms of web CPU a report
    bench/load.py [10.9] (1,000 agents, shipped settings): 4,940 agents' 503s; tenant p99 2,982 ms;
        delivery p99 35 s; 474/474 jobs and 1,791/1,791 reports accounted for (the web workers got one core)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import http.client
import json
import math
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path
from api import _request, _server_env, _stop  # noqa: E402

GPU_TYPE = "H100"
GPU_MODEL = "NVIDIA H100 80GB HBM3"
ROUND_SECONDS = 10
NODE_CHECK_SECONDS = 10  # config/settings.py's default
GPUS_PER_NODE = 8
HEARTBEAT_S = 15.0  # the server's heartbeat_seconds
USAGE_S = 10.0  # the agent's default sample interval
RUN_S = (5.0, 30.0)  # how long a simulated job runs before it exits 0
RAMP_S = 10.0  # protocol 1 agents start spread over this long before the measured window
# Protocol 2 agents report at once when they start, then at the server's interval (20 s at 1,000 agents): they
# start spread over one ceiling interval, as a fleet that was running when the window opens, not a 10-s boot
# storm of every machine at once.
RAMP_V2_S = 30.0
METRICS_TOKEN = "bench-load-metrics"


def _log(message: str) -> None:
    print(f"bench/load: {message}", file=sys.stderr, flush=True)


def _seed(tenants: int, agents: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Returns (slug, token) per tenant and (node name, bootstrap secret) per agent."""
    from accounts import services as accounts_services
    from accounts.models import Role, User
    from accounts.tokens import token_create
    from config.money import MICRO
    from inventory.services.gpu_types import gpu_type_save
    from market.selectors.policy import market_policy
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
    """Latencies and statuses of one phase, from any number of threads (tenants) and the agents' loop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = {"tenant": [], "agent": []}
        self.by_kind: dict[str, list[float]] = {}  # "POST heartbeat" etc.: where the time goes
        self.statuses: dict[int, int] = {}
        self.samples_5xx: list[str] = []
        # Open loop: how late each arrival's first request left against its scheduled time. Its latency is
        # counted from the schedule (began), so a client that falls behind cannot hide the wait.
        self.late: list[float] = []

    def note(self, who: str, kind: str, elapsed: float, status: int, sample: str = "") -> None:
        with self.lock:
            self.latencies[who].append(elapsed)
            self.by_kind.setdefault(kind, []).append(elapsed)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if (status >= 500 or status < 0) and len(self.samples_5xx) < 5:
                self.samples_5xx.append(sample)

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
        self.note(
            who, f"{method} {_route(path)}", elapsed, status, f"{method} {path} {status} {reply[:300]!r}"
        )
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


class Unavailable(Exception):
    """No answer, a 5xx, 409 or 429: the agent backs off and tries again (nodeagent/agent/client.py)."""


class Window:
    """What the agents' loop records: only requests that start inside the measured window count."""

    def __init__(self, rec: Recorder, start: float, end: float, stop_at: float) -> None:
        self.rec, self.start, self.end = rec, start, end  # time.perf_counter(), as the latencies
        self.stop_at = stop_at  # time.monotonic(), as the agents' schedules
        self.held: list[float] = []  # long polls that waited: time held, not latency
        self.woken = 0  # of those, answered with commands before their wait ran out
        # (command id, wall-clock time received, wall-clock time its poll was sent)
        self.deliveries: list[tuple[int, float, float]] = []
        self.usage_acked: list[tuple[str, int, int]] = []  # every report acknowledged, window or not
        self.wire_bytes: list[int] = []  # each protocol 2 report's gzipped size

    def counts(self, began: float) -> bool:
        return self.start <= began < self.end


class LongPollAgent:
    """One node's agent on the wire, on the schedule of nodeagent/agent/daemon.py without processes or NVML.

    As the daemon does: a local step (a job that ended, or the sample interval come round, takes a sample
    and spools a usage report), then a server step in the daemon's order: acknowledgements, starts, spooled
    reports, exits (after their final report is acknowledged), the heartbeat when due, then the command poll
    with `wait` = the whole seconds until the next local duty or heartbeat, at most poll_seconds (20) and 25;
    a poll that did not wait is not repeated within a second. A bound job "runs" for RUN_S and exits 0; a
    preempt or release ends it at once. Errors back off 1 s doubling to 60 s with jitter, as the daemon's
    Backoff does. HTTP as urllib sends it: one connection per request."""

    BOOT_EPOCH = 1
    LONG_POLL_MAX_S = 25

    def __init__(
        self, name: str, credential: str, poll_seconds: int, rng: random.Random, http: Any, base: str
    ) -> None:
        self.name, self.credential, self.poll_seconds, self.rng = name, credential, poll_seconds, rng
        self.http, self.base = http, base
        self.last_command = 0
        self.seq = 0
        self.running: dict[int, dict[str, Any]] = {}  # lease -> {"gpus", "started", "ends", "reported"}
        self.finished: list[tuple[int, dict[str, Any], str | None, int]] = []  # ..., stopped_by, final seq
        self.spool: list[dict[str, Any]] = []
        self.acks: list[int] = []
        self.failures = 0
        now = time.monotonic()
        self.next_try = self.next_sample = self.next_heartbeat = self.next_poll = now
        self.stats = {"binds": 0, "stops": 0, "exits": 0, "usage_reports": 0, "refused": 0, "backoffs": 0}

    async def call(
        self, win: Window, method: str, path: str, body: Any = None, wait: int = 0, compress: bool = False
    ) -> Any:
        headers = {
            "Authorization": f"Bearer {self.credential}",
            "Accept": "application/json",
            "User-Agent": "gpumarket-agent/bench",
        }
        began = time.perf_counter()
        kind = f"{method} {_route('/api/v1/agent/' + path)}" + (" (wait)" if wait else "")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
            if compress:  # as the agent's client: gzip, level 6
                data = gzip.compress(data, compresslevel=6, mtime=0)
                headers["Content-Encoding"] = "gzip"
                win.wire_bytes.append(len(data))
        try:
            async with self.http.request(
                method, self.base + path, data=data, headers=headers, timeout=_timeout(10.0 + wait)
            ) as response:
                status, raw = response.status, await response.read()
        except (OSError, TimeoutError, _client_errors()) as exc:
            if win.counts(began):
                win.rec.failed(exc)
            raise Unavailable(repr(exc)) from None
        elapsed = time.perf_counter() - began
        if win.counts(began):
            if wait and status == 200:
                win.held.append(elapsed)
                with win.rec.lock:
                    win.rec.statuses[status] = win.rec.statuses.get(status, 0) + 1
            else:
                win.rec.note("agent", kind, elapsed, status, f"{method} {path} {status} {raw[:300]!r}")
        if status >= 500 or status in (409, 429):
            raise Unavailable(f"{method} {path}: {status}")
        if status >= 400:
            self.stats["refused"] += 1
            return None
        return json.loads(raw) if raw else {}

    async def run(self, win: Window, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        self.next_try = self.next_sample = self.next_heartbeat = self.next_poll = time.monotonic()
        while time.monotonic() < win.stop_at:
            self.local_step(time.monotonic())
            if time.monotonic() >= self.next_try:
                await self.server_step(win)
            now = time.monotonic()
            server = self.next_try if self.failures else min(self.next_poll, self.next_heartbeat)
            await asyncio.sleep(max(0.0, min(self.next_sample, server, win.stop_at) - now))

    # Local step: jobs that ended, samples.
    def local_step(self, now: float) -> None:
        ended = [lease for lease, job in self.running.items() if now >= job["ends"]]
        for lease in ended:
            self.finished.append((lease, self.running.pop(lease), None, 0))
        if ended or now >= self.next_sample:
            self.sample(now)

    def end_job(self, lease: int, stopped_by: str) -> None:
        if lease in self.running:
            self.finished.append((lease, self.running.pop(lease), stopped_by, 0))

    def sample(self, now: float) -> None:
        """One report with a sample per GPU and the counters of every running job and of every job that
        ended since (its final counters: its exit is reported once this report is acknowledged)."""
        self.next_sample = now + USAGE_S
        self.seq += 1
        self.finished = [(lease, job, by, seq or self.seq) for lease, job, by, seq in self.finished]
        final = [(lease, job) for lease, job, _, seq in self.finished if seq == self.seq]
        leases = [_counters(lease, job, now) for lease, job in [*self.running.items(), *final]]
        sent_at = _utc_now()
        report = {"boot_epoch": self.BOOT_EPOCH, "seq": self.seq, "sent_at": sent_at, "leases": leases}
        report["gpus"] = _samples(self.name, self.running, self.seq, sent_at)
        self.spool.append(report)

    # Server step, in the daemon's order.
    async def server_step(self, win: Window) -> None:
        try:
            await self.send_acks(win)
            await self.send_started(win)
            await self.send_spool(win)
            await self.send_exits(win)
            if time.monotonic() >= self.next_heartbeat:
                await self.heartbeat(win)
            if time.monotonic() >= self.next_poll:
                await self.fetch_commands(win)
        except Unavailable:
            ceiling = min(60.0, 2.0**self.failures)
            self.failures += 1
            self.stats["backoffs"] += 1
            self.next_try = time.monotonic() + self.rng.uniform(ceiling / 2, ceiling)
            return
        self.failures = 0
        self.next_try = time.monotonic()

    async def send_acks(self, win: Window) -> None:
        while self.acks:
            await self.call(win, "POST", f"commands/{self.acks[0]}/ack", {"result": "applied", "detail": ""})
            self.acks.pop(0)

    async def send_started(self, win: Window) -> None:
        for lease, job in list(self.running.items()):
            if not job["reported"]:
                await self.call(win, "POST", f"leases/{lease}/started", {"at": _utc_now()})
                job["reported"] = True

    async def send_spool(self, win: Window) -> None:
        while self.spool:
            report = self.spool[0]
            answer = await self.call(win, "POST", "usage", report)
            if answer is not None:
                win.usage_acked.append((self.name, self.BOOT_EPOCH, report["seq"]))
            self.stats["usage_reports"] += 1
            self.spool.pop(0)

    async def send_exits(self, win: Window) -> None:
        pending = {r["seq"] for r in self.spool}
        for item in list(self.finished):
            lease, job, stopped_by, seq = item
            if not seq or seq in pending or not job["reported"]:
                continue
            usage = _counters(lease, job, math.inf)
            del usage["lease"]
            body = {
                "exit_code": 0 if stopped_by is None else None,
                "signal": None if stopped_by is None else 15,
            }
            await self.call(
                win, "POST", f"leases/{lease}/exited", body | {"stopped_by": stopped_by, "usage": usage}
            )
            self.finished.remove(item)
            self.stats["exits"] += 1

    async def heartbeat(self, win: Window) -> None:
        body = {"boot_epoch": self.BOOT_EPOCH, "leases": sorted(self.running)}
        await self.call(win, "POST", "heartbeat", body)
        self.next_heartbeat = time.monotonic() + HEARTBEAT_S

    async def fetch_commands(self, win: Window) -> None:
        mono = time.monotonic()
        until = min(
            self.LONG_POLL_MAX_S, self.poll_seconds, self.next_sample - mono, self.next_heartbeat - mono
        )
        wait = int(max(0.0, until))
        began, sent = time.perf_counter(), time.time()
        answer = await self.call(win, "GET", f"commands?after={self.last_command}&wait={wait}", wait=wait)
        self.next_poll = time.monotonic() + (0.0 if wait else 1.0)
        commands = sorted((answer or {}).get("commands", []), key=lambda c: int(c["id"]))
        if wait and commands and win.counts(began):
            win.woken += 1
        for command in commands:
            if int(command["id"]) <= self.last_command:
                continue
            if win.counts(began):
                win.deliveries.append((int(command["id"]), time.time(), sent))
            self.apply(command)
            self.last_command = int(command["id"])
            self.acks.append(int(command["id"]))
            await self.send_acks(win)
            await self.send_started(win)

    def apply(self, command: dict[str, Any]) -> None:
        lease, payload = int(command["lease"]), command.get("payload") or {}
        if command["kind"] == "bind":
            now = time.monotonic()
            self.running[lease] = {
                "gpus": list(payload.get("gpus") or []),
                "started": now,
                "ends": now + self.rng.uniform(*RUN_S),
                "reported": False,
            }
            self.stats["binds"] += 1
        else:  # preempt or release: the "process" is signalled and gone at once
            self.stats["stops"] += 1
            if lease in self.running:
                self.running[lease]["stopped_at"] = time.monotonic()
            self.end_job(lease, "preempt" if command["kind"] == "preempt" else "release")


class ReportingAgent(LongPollAgent):
    """One node's agent speaking protocol 2, on the schedule of nodeagent/agent/daemon.py and poller.py: a
    sample every USAGE_S kept in its spool; one gzipped report (every sample since, acknowledgements, starts,
    exits, the counters) at the interval the server's last answer gave, and at once after an event that
    matters now (a job ended, a bind); the command poll in a task of its own, held for 75-100% of the
    server's poll_seconds, renewed after the commands it brought are applied. A report that got no answer is
    sent again as it was (same seq). Errors back off as the daemon does."""

    MAX_TICKS = 360

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ticks: list[dict[str, Any]] = []  # samples not yet in a report
        self.tick_no = 0
        self.pending: dict[str, Any] | None = None  # the assembled report not yet acknowledged
        self.report_s, self.next_report, self.report_now = 10.0, 0.0, True
        self.poll_s = float(self.poll_seconds)
        self.wake: asyncio.Event | None = None
        self.stats |= {"reports": 0, "polls": 0}

    async def run(self, win: Window, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        self.wake = asyncio.Event()
        now = time.monotonic()
        self.next_try = self.next_sample = self.next_report = now
        poller = asyncio.create_task(self.poll_loop(win))
        try:
            while time.monotonic() < win.stop_at:
                self.local_step(time.monotonic())
                now = time.monotonic()
                if now >= self.next_try and (self.report_now or now >= self.next_report):
                    await self.server_step(win)
                now = time.monotonic()
                server = self.next_try if self.failures else (now if self.report_now else self.next_report)
                self.wake.clear()
                timeout = max(0.0, min(self.next_sample, server, win.stop_at) - now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
        finally:
            poller.cancel()

    def local_step(self, now: float) -> None:
        ended = [lease for lease, job in self.running.items() if now >= job["ends"]]
        for lease in ended:
            self.finished.append((lease, self.running.pop(lease), None, 0))
        if ended or now >= self.next_sample:
            self.sample(now)
        if ended:
            self.report_now = True

    def end_job(self, lease: int, stopped_by: str) -> None:
        super().end_job(lease, stopped_by)
        self.sample(time.monotonic())  # as the daemon: the job's end takes a sample, then a report at once
        self.report_now = True

    def sample(self, now: float) -> None:
        self.next_sample = now + USAGE_S
        self.tick_no += 1
        self.finished = [(lease, job, by, tick or self.tick_no) for lease, job, by, tick in self.finished]
        final = [(lease, job) for lease, job, _, tick in self.finished if tick == self.tick_no]
        owner = {gpu: lease for lease, job in self.running.items() for gpu in job["gpus"]}
        uuids = [f"GPU-{self.name}-{g}" for g in range(GPUS_PER_NODE)]
        leases = [owner.get(u, 0) for u in uuids]
        self.ticks.append(
            {
                "no": self.tick_no,
                "t": round(time.time(), 3),
                "util": [95 if lease else 0 for lease in leases],
                "mem_mb": [30000 if lease else 0 for lease in leases],
                "power_w": [300.0 if lease else 60.0 for lease in leases],
                "energy_j": [1000.0 * self.tick_no] * GPUS_PER_NODE,
                "lease": leases,
                "processes": [
                    {"gpu": u, "pid": 1000 + g, "used_mb": 30000.0, "lease": lease}
                    for g, (u, lease) in enumerate(zip(uuids, leases, strict=True))
                    if lease
                ],
                "leases": [_counters(lease, job, now) for lease, job in [*self.running.items(), *final]],
            }
        )

    def assemble(self) -> dict[str, Any]:
        ticks, self.ticks = self.ticks[: self.MAX_TICKS], self.ticks[self.MAX_TICKS :]
        self.seq += 1
        counters: dict[int, dict[str, Any]] = {}
        for tick in ticks:
            for c in tick["leases"]:
                counters[c["lease"]] = c
        report: dict[str, Any] = {"seq": self.seq, "sent_at": _utc_now(), "leases": list(counters.values())}
        report["last_tick"] = ticks[-1]["no"] if ticks else 0
        if ticks:
            report["usage"] = {
                "gpus": [f"GPU-{self.name}-{g}" for g in range(GPUS_PER_NODE)],
                "t": [tick["t"] for tick in ticks],
                **{
                    k: [tick[k] for tick in ticks] for k in ("util", "mem_mb", "power_w", "energy_j", "lease")
                },
                "foreign": [[0] * GPUS_PER_NODE for _ in ticks],
                "processes": ticks[-1]["processes"],
            }
        return report

    async def server_step(self, win: Window) -> None:
        try:
            while True:
                if self.pending is None:
                    self.pending = self.assemble()
                await self.report(win, self.pending)
                self.pending = None
                if not self.ticks:
                    break
        except Unavailable:
            ceiling = min(60.0, 2.0**self.failures)
            self.failures += 1
            self.stats["backoffs"] += 1
            self.next_try = time.monotonic() + self.rng.uniform(ceiling / 2, ceiling)
            return
        self.failures = 0
        self.next_try = time.monotonic()

    async def report(self, win: Window, pending: dict[str, Any]) -> None:
        acks = list(self.acks)
        started = [lease for lease, job in self.running.items() if not job["reported"]]
        started += [lease for lease, job, _, _ in self.finished if not job["reported"]]
        exits = [item for item in self.finished if item[3] and item[3] <= pending["last_tick"]]
        exited = []
        for lease, job, stopped_by, _ in exits:
            usage = _counters(lease, job, math.inf)
            del usage["lease"]
            exited.append(
                {
                    "lease": lease,
                    "exit_code": 0 if stopped_by is None else None,
                    "signal": None if stopped_by is None else 15,
                    "stopped_by": stopped_by,
                    "usage": usage,
                }
            )
        body = {
            "protocol": 2,
            "boot_epoch": self.BOOT_EPOCH,
            "seq": pending["seq"],
            "sent_at": pending["sent_at"],
            "running": sorted(self.running),
            "acks": [{"command": c, "result": "applied", "detail": ""} for c in acks],
            "started": [{"lease": lease, "at": _utc_now()} for lease in started],
            "exited": exited,
            "leases": pending["leases"],
        }
        if "usage" in pending:
            body["usage"] = pending["usage"]
        answer = await self.call(win, "POST", "report", body, compress=True)
        self.stats["reports"] += 1
        if answer is not None:
            win.usage_acked.append((self.name, self.BOOT_EPOCH, pending["seq"]))
            self.report_s = float(answer.get("report_seconds") or self.report_s)
            self.poll_s = float(answer.get("poll_seconds") or self.poll_s)
        del self.acks[: len(acks)]
        for lease in started:
            if lease in self.running:
                self.running[lease]["reported"] = True
        for item in self.finished:
            if item[0] in started:
                item[1]["reported"] = True
        for item in exits:
            self.finished.remove(item)
            self.stats["exits"] += 1
        self.report_now = False
        self.next_report = time.monotonic() + self.report_s

    async def poll_loop(self, win: Window) -> None:
        failures = 0
        while time.monotonic() < win.stop_at:
            wait = int(self.poll_s * self.rng.uniform(0.75, 1.0))
            began, sent = time.perf_counter(), time.time()
            try:
                answer = await self.call(
                    win, "GET", f"commands?after={self.last_command}&wait={wait}", wait=wait
                )
            except Unavailable:
                ceiling = min(60.0, 2.0**failures)
                failures += 1
                await asyncio.sleep(self.rng.uniform(ceiling / 2, ceiling))
                continue
            failures = 0
            self.stats["polls"] += 1
            commands = sorted((answer or {}).get("commands", []), key=lambda c: int(c["id"]))
            if commands and win.counts(began):
                win.woken += 1
            for command in commands:
                if int(command["id"]) <= self.last_command:
                    continue
                if win.counts(began):
                    win.deliveries.append((int(command["id"]), time.time(), sent))
                self.apply(command)
                self.last_command = int(command["id"])
                self.acks.append(int(command["id"]))
                if command["kind"] == "bind":
                    self.report_now = True  # a bind that started: at once; a stop's exit follows at once
            if commands and self.wake is not None:
                self.wake.set()


def _counters(lease: int, job: dict[str, Any], now: float) -> dict[str, Any]:
    seconds = max(0.0, min(now, job.get("stopped_at", job["ends"])) - job["started"])
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


def _samples(name: str, running: dict[int, dict[str, Any]], seq: int, at: str) -> list[dict[str, Any]]:
    """One sample per GPU, as NVML gives them: busy GPUs with the lease's process, idle ones empty."""
    owner = {gpu: lease for lease, job in running.items() for gpu in job["gpus"]}
    out = []
    for g in range(GPUS_PER_NODE):
        uuid_ = f"GPU-{name}-{g}"
        lease = owner.get(uuid_)
        out.append(
            {
                "uuid": uuid_,
                "at": at,
                "healthy": True,
                "util_pct": 95.0 if lease else 0.0,
                "mem_used_mb": 30000.0 if lease else 0.0,
                "power_w": 300.0 if lease else 60.0,
                "energy_j": 1000.0 * seq,
                "processes": [{"pid": 1000 + g, "used_mb": 30000.0, "lease": lease}] if lease else [],
            }
        )
    return out


def _timeout(seconds: float) -> Any:
    import aiohttp

    return aiohttp.ClientTimeout(total=seconds)


def _client_errors() -> type[Exception]:
    import aiohttp

    return aiohttp.ClientError


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
        plan["poll_seconds"] = int(reply["poll_seconds"])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(len(plan["agents"]))))
    return [o for o in out if o is not None]


def _run_tenants(plan: dict[str, Any], seconds: float, rec: Recorder, tenants: Tenants | None) -> None:
    """Tenant clients (threads, as before): open loop at plan["tenant_rate"] per second, or closed loop;
    `tenants` None: the no-op baseline (GET /api/v1/me as fast as answers come)."""
    deadline = time.perf_counter() + seconds
    rate = 0.0 if tenants is None else float(plan.get("tenant_rate") or 0)
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
                if tenants is None:
                    token = plan["tenants"][n % len(plan["tenants"])][1]
                    rec.send(conn, "tenant", "GET", "/api/v1/me", token)
                else:
                    tenants.act(conn, rng)
            except (OSError, http.client.HTTPException) as exc:
                rec.failed(exc)
                conn.close()
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(plan["clients"])]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


async def _load(
    plan: dict[str, Any], registered: list[tuple[str, str]], rec: Recorder, tenants: Tenants
) -> Any:
    """The agents on one event loop, started over RAMP_S (machines do not all boot in the same second);
    then the measured window: tenants' actions in threads beside them for plan["seconds"]."""
    import aiohttp

    ramp = RAMP_V2_S if plan["protocol"] == 2 else RAMP_S
    start, began = time.monotonic(), time.perf_counter()
    win = Window(rec, began + ramp, began + ramp + plan["seconds"], start + ramp + plan["seconds"])
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    base = f"http://127.0.0.1:{plan['port']}/api/v1/agent/"
    async with aiohttp.ClientSession(connector=connector) as http_:
        kind = ReportingAgent if plan["protocol"] == 2 else LongPollAgent
        agents = [
            kind(name, credential, plan["poll_seconds"], random.Random(f"agent-{name}"), http_, base)
            for name, credential in registered
        ]
        tasks = [asyncio.create_task(a.run(win, start + a.rng.uniform(0, ramp))) for a in agents]
        await asyncio.sleep(ramp)
        cpu_before = _cpu_now(plan)
        loop = asyncio.get_running_loop()
        tenant_run = loop.run_in_executor(None, _run_tenants, plan, plan["seconds"], rec, tenants)
        await asyncio.sleep(plan["seconds"] / 2)
        waiting = await _polls_waiting(http_, plan)
        waiting |= _server_processes(plan)
        await tenant_run
        cpu_after = _cpu_now(plan)
        await asyncio.sleep(max(0.0, win.stop_at - time.monotonic()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    totals = {k: sum(a.stats[k] for a in agents) for k in agents[0].stats}
    cpu = {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_before}
    return win, totals, waiting, cpu


async def _polls_waiting(http_: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """gpumarket_agent_polls_waiting from /metrics, summed over the server's workers."""
    url = f"http://127.0.0.1:{plan['port']}/metrics"
    async with http_.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) as response:
        text = await response.text()
    values = [
        float(x.split()[-1]) for x in text.splitlines() if x.startswith("gpumarket_agent_polls_waiting ")
    ]
    return {"polls_waiting": sum(values) if values else None}


def _server_processes(plan: dict[str, Any]) -> dict[str, Any]:
    """Threads and resident memory of the web server's processes (master and workers), now."""
    threads, rss_kb = 0, 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(entry) == plan["server_pid"] or fields.get("PPid", "").strip() == str(plan["server_pid"]):
            threads += int(fields["Threads"])
            rss_kb += int(fields["VmRSS"].split()[0])
    return {"server_threads": threads, "server_rss_mb": round(rss_kb / 1024)}


def _cpu_now(plan: dict[str, Any]) -> dict[str, float]:
    """CPU seconds so far of the web server (master and workers), PostgreSQL, Redis, this driver and the
    bench's own process (its round ticker), read from /proc: where the machine's time goes."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"server": 0.0, "postgres": 0.0, "redis": 0.0, "driver": 0.0, "rounds": 0.0, "other": 0.0}
    server = {plan["server_pid"]}
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        rows.append((int(entry), int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / tick))
    for pid, ppid, _, _ in rows:
        if ppid in server:
            server.add(pid)
    for pid, _, comm, seconds in rows:
        if pid in server:
            out["server"] += seconds
        elif comm.startswith("postgres"):
            out["postgres"] += seconds
        elif comm.startswith("redis"):
            out["redis"] += seconds
        elif pid == os.getpid():
            out["driver"] += seconds
        elif pid == os.getppid():
            out["rounds"] += seconds
        else:
            out["other"] += seconds
    return out


def _drive(plan: dict[str, Any]) -> dict[str, Any]:
    registered = _register(plan)
    _run_tenants(plan, plan["baseline_s"], Recorder(), None)  # warm-up: imports, connections, URLs
    baseline = Recorder()
    _run_tenants(plan, plan["baseline_s"], baseline, None)
    rec = Recorder()
    tenants = Tenants(plan, rec)
    win, totals, waiting, cpu = asyncio.run(_load(plan, registered, rec, tenants))
    agent_kinds = {k: v for k, v in rec.by_kind.items() if k.split()[1].startswith(("agent", "commands"))}
    return {
        "tenant": rec.latencies["tenant"],
        "agent": rec.latencies["agent"],
        "noop": baseline.latencies["tenant"],
        "statuses": rec.statuses,
        "late_p99_ms": _pct(rec.late, 0.99),
        "held": win.held,
        "woken": win.woken,
        "deliveries": win.deliveries,
        "usage_acked": win.usage_acked,
        "wire_bytes": win.wire_bytes,
        "accepted": sorted(tenants.accepted),
        "agents": totals,
        "polls_waiting": waiting,
        "cpu_s": cpu,
        "loadavg": os.getloadavg(),
        "by_kind": {
            kind: [len(values), round(_pct(values, 0.5), 1), round(_pct(values, 0.99), 1)]
            for kind, values in sorted(rec.by_kind.items())
        },
        "agent_kinds": sorted(agent_kinds),
        "samples_5xx": rec.samples_5xx,
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def _serve_web(
    sock: socket.socket, server: str, workers: int | None, scratch: Path
) -> subprocess.Popen[bytes]:
    """The web server on an already bound socket (fd://): `asgi`, the shipped settings (config/gunicorn.py
    serving config.asgi); `wsgi-sync`, the settings shipped before (config.wsgi, sync workers, 2 x cores + 1)."""
    fd = sock.fileno()
    if server == "asgi":
        cmd = [sys.executable, "-m", "gunicorn", "-c", "python:config.gunicorn", "config.asgi:application"]
    else:
        workers = workers or 2 * multiprocessing.cpu_count() + 1
        cmd = [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--worker-class", "sync"]
        cmd += ["--timeout", "60"]
    cmd += ["--bind", f"fd://{fd}", "--log-level", "warning"]
    if workers:
        cmd += ["--workers", str(workers)]
    # As the systemd unit does: every worker writes its metrics there and /metrics adds them up.
    (scratch / "metrics").mkdir(exist_ok=True)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(scratch / "metrics")}
    with (scratch / "server.log").open("a") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, pass_fds=[fd], stdout=out, stderr=out)


def _delivery(deliveries: list[tuple[int, float, float]]) -> dict[str, Any]:
    """Each command's delay from its row's created_at (for a round's commands, the start of the round's
    commit) to its agent receiving it. `waiting_`: only commands written while their agent's poll was already
    waiting, from the end of the writing (for a round's, created_at plus the commit's own time): the wake-up
    path alone; the others waited for their agent to come back from its other calls."""
    from market.models import Command, Round

    received = {pk: (at, sent) for pk, at, sent in deliveries}
    rows = list(
        Command.objects.filter(pk__in=list(received)).values_list("pk", "created_at", "kind", "fence")
    )
    commit_ms = dict(Round.objects.filter(pk__in={r[3] for r in rows}).values_list("pk", "commit_ms"))
    written = [received[pk][0] - at.timestamp() for pk, at, _, _ in rows]
    waiting = []
    for pk, at, kind, fence in rows:
        done = at.timestamp() + ((commit_ms.get(fence) or 0) / 1000 if kind in ("bind", "preempt") else 0)
        if received[pk][1] < at.timestamp():
            waiting.append(received[pk][0] - done)
    return {
        "commands_delivered": len(rows),
        "delivery_p50_ms": round(_pct(written, 0.5), 1),
        "delivery_p99_ms": round(_pct(written, 0.99), 1),
        "delivery_max_ms": round(_pct(written, 1.0), 1),
        "delivered_to_a_waiting_poll": len(waiting),
        "waiting_delivery_p50_ms": round(_pct(waiting, 0.5), 1),
        "waiting_delivery_p99_ms": round(_pct(waiting, 0.99), 1),
    }


def _usage_accounted(acked: list[tuple[str, int, int]]) -> int:
    """How many acknowledged reports are stored (every one should be): a row each in UsageSample since
    issue 36 (protocol 2, and protocol 1's reports converted), in UsageReport before."""
    from market.models import UsageReport, UsageSample

    stored = set()
    for model in (UsageSample, UsageReport):
        stored |= set(
            model.objects.filter(node__name__startswith="load-").values_list(
                "node__name", "boot_epoch", "seq"
            )
        )
    return sum(1 for a in acked if tuple(a) in stored)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument(
        "--agents", type=int, default=1000, help="long-polling agents, one node of 8 GPUs each (1000)"
    )
    parser.add_argument("--clients", type=int, default=16, help="tenant client threads (default 16)")
    parser.add_argument(
        "--tenant-rate",
        type=float,
        default=10.0,
        help="open loop: tenants' actions arrive at this many per second (Poisson; default 10), served by "
        "--clients threads, each latency counted from its scheduled arrival; 0: closed loop, each client "
        "acting again as soon as its last answer came (what the machine saturates at)",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the measured load (60)")
    parser.add_argument(
        "--server",
        choices=["asgi", "wsgi-sync"],
        default="asgi",
        help="asgi: the shipped settings (default); wsgi-sync: the sync workers shipped before, to compare",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="web workers (default: the server's own default)"
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=[1, 2],
        default=2,
        help="2: agents report as the protocol 2 daemon does (default); 1: the first protocol's schedule",
    )
    parser.add_argument(
        "--report-budget",
        type=int,
        default=None,
        help="MarketPolicy.agent_report_budget_rps for the run (default: the shipped 50); a small one puts "
        "the agents at the ceiling interval (30 s), the cadence of a fleet past 1,500 nodes",
    )
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        print(json.dumps(_drive(json.load(sys.stdin))))
        return
    if args.tenant_rate < 0:
        parser.error("--tenant-rate: must be 0 (closed loop) or a rate above 0")
    if min(args.agents, args.tenants, args.clients, args.workers or 1) < 1 or args.seconds <= 0:
        parser.error("--agents, --tenants, --clients and --workers must be at least 1, --seconds above 0")
    url = os.environ.get("BENCH_LOAD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_load")
    fresh_database(url)
    scratch = Path(tempfile.mkdtemp(prefix="bench-load-"))
    os.environ.update(_server_env(url))
    os.environ.update(
        {
            "REDIS_URL": os.environ.get("BENCH_LOAD_REDIS_URL") or "redis://127.0.0.1:6379/0",
            "METRICS_TOKEN": METRICS_TOKEN,
        }
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    tenants, agents = _seed(args.tenants, args.agents)
    if args.report_budget is not None:
        from market.selectors.policy import market_policy

        policy = market_policy()
        policy.agent_report_budget_rps = args.report_budget
        policy.save()
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE")
        deadlocks_before = _deadlocks(cursor)
    connections.close_all()
    stop, rounds_done = threading.Event(), [0]
    round_errors: list[str] = []
    log = scratch / "server.log"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)
        port = sock.getsockname()[1]
        server = _serve_web(sock, args.server, args.workers, scratch)
    ticker = threading.Thread(target=_rounds, args=(stop, rounds_done, round_errors))
    started = time.time()
    try:
        time.sleep(4)  # gunicorn's workers start
        ticker.start()
        plan = {"port": port, "tenants": tenants, "agents": agents, "clients": args.clients}
        plan |= {"seconds": args.seconds, "baseline_s": 3.0, "tenant_rate": args.tenant_rate}
        plan |= {"server_pid": server.pid, "protocol": args.protocol}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--drive"]
        done = subprocess.run(cmd, input=json.dumps(plan), capture_output=True, text=True, check=False)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"bench/load: the driver failed ({done.returncode})")
        result = json.loads(done.stdout)
        (scratch / "driver.json").write_text(done.stdout)  # the raw figures, for a closer look
        conflicts = _db_conflicts(port)
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join(60)
        _stop(server)
        errors = [line for line in log.read_text().splitlines() if "Error" in line or "Traceback" in line]
        for line in errors[:10]:
            _log(f"server: {line}")
    from market.models import Command, EndReason, Job, Lease, LeaseState
    from market.selectors.ledger import ledger_problems

    accounted = Job.objects.filter(pk__in=result["accepted"]).exclude(state="").count()
    settled = Lease.objects.filter(state=LeaseState.ENDED, charged__isnull=False).count()
    # Nodes declared lost (heartbeat older than NODE_DOWN_SECONDS): their leases settled for what was reported.
    lost = Lease.objects.filter(end_reason=EndReason.NODE_LOST).count()
    errors_5xx = sum(n for code, n in result["statuses"].items() if int(code) >= 500 or int(code) < 0)
    errors_500 = result["statuses"].get("500", 0)
    time.sleep(1.5)  # the server's backends have exited and published their counts
    with connections["default"].cursor() as cursor:
        deadlocks = _deadlocks(cursor) - deadlocks_before
    for sample in result["samples_5xx"]:
        _log(f"5xx: {sample}")
    for error in round_errors[:5]:
        _log(f"round error: {error}")
    delivery = _delivery(result["deliveries"])
    everything = result["tenant"] + result["agent"]
    noop_p99 = _pct(result["noop"], 0.99)
    tenant_p99 = _pct(result["tenant"], 0.99)
    out = {
        "bench": "load",
        "server": args.server,
        "requests": len(everything),
        "errors_5xx": errors_5xx,
        "agent_shed_503": result["statuses"].get("503", 0),  # agents turned away unrun (config/slots.py)
        "errors_500": errors_500,  # issue 38's property: none (the run exits 1 after this line otherwise)
        "deadlocks": deadlocks,  # detected by PostgreSQL in the bench database over the whole run
        "db_conflicts": conflicts,  # config/dbretry.py's net: {outcome: count} from /metrics
        "p50_ms": round(_pct(everything, 0.5), 1),
        "p99_ms": round(_pct(everything, 0.99), 1),
        "tenant_p50_ms": round(_pct(result["tenant"], 0.5), 1),
        "tenant_p99_ms": round(tenant_p99, 1),
        "agent_p50_ms": round(_pct(result["agent"], 0.5), 1),
        "agent_p99_ms": round(_pct(result["agent"], 0.99), 1),
        "noop_p99_ms": round(noop_p99, 1),
        "noop_per_s": round(len(result["noop"]) / 3.0, 1),
        "p99_ratio": round(tenant_p99 / max(noop_p99, 0.001), 2),
        "polls_held": len(result["held"]),
        "held_p50_s": round(_pct(result["held"], 0.5) / 1000, 2),
        "held_p99_s": round(_pct(result["held"], 0.99) / 1000, 2),
        "polls_woken": result["woken"],
        "polls_waiting_mid": result["polls_waiting"]["polls_waiting"],
        "server_threads_mid": result["polls_waiting"]["server_threads"],
        "server_rss_mb_mid": result["polls_waiting"]["server_rss_mb"],
        **delivery,
        "rounds": rounds_done[0],
        "accepted_jobs": len(result["accepted"]),
        "accounted_jobs": accounted,
        "protocol": args.protocol,
        "usage_acked": len(result["usage_acked"]),
        "report_gzip_bytes_p50": round(_pct(result["wire_bytes"], 0.5) / 1000),
        "usage_accounted": _usage_accounted(result["usage_acked"]),
        "commands_pending_at_end": Command.objects.filter(state="pending").count(),
        "leases_settled": settled,
        "leases_node_lost": lost,
        "agent_events": result["agents"],
        "by_kind": result["by_kind"],  # [requests, p50_ms, p99_ms]
        "statuses": result["statuses"],
        "round_errors": len(round_errors),
        "ledger_ok": ledger_problems() == [],
        "cpu_s": result["cpu_s"],  # over the measured window, on nproc cores
        "cpu_cores": os.cpu_count(),
        "loadavg": [round(x, 2) for x in result["loadavg"]],
        "late_p99_ms": round(result["late_p99_ms"], 1),
        "requests_per_s": round(len(everything) / args.seconds, 1),
        "tenants": args.tenants,
        "agents": args.agents,
        "clients": args.clients,
        "tenant_rate": args.tenant_rate or None,
        "workers": args.workers,
        "report_budget": args.report_budget,
        "seconds": args.seconds,
        "wall_s": round(time.time() - started, 1),
    }
    print(json.dumps(out))
    if errors_500:
        raise SystemExit(f"bench/load: {errors_500} requests answered 500 (see the 5xx samples above)")


def _deadlocks(cursor: Any) -> int:
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    return int(cursor.fetchone()[0])


def _db_conflicts(port: int) -> dict[str, float]:
    """gpumarket_db_conflicts_total from /metrics, summed by outcome over the server's workers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    text = conn.getresponse().read().decode()
    conn.close()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gpumarket_db_conflicts_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0.0) + float(line.split()[-1])
    return counts


if __name__ == "__main__":
    main()
