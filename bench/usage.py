"""Usage at fleet scale (issue 36 §2): ingestion per web-worker CPU-second, protocol 2 against protocol 1 in
the same run, and the storage's bytes per GPU sample with its daily growth and steady state.

Builds a fresh database (BENCH_USAGE_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage: dropped and re-created) with --nodes registered
nodes of 8 GPUs, each running two 4-GPU leases. The unit is one agent's report: protocol 2's `POST report`
body (8 GPUs x --ticks ticks of 10 s, gzip, the leases' counters) against protocol 1's `POST usage` (8 GPUs,
one tick, plain JSON, as today). Values look like a fleet's (utilisation with noise around a per-job level,
memory that stays put, power from utilisation, NVML's cumulative energy counter).

1. The service path, in this process: body bytes -> (gunzip) -> json -> parse -> ingest, each report its
   own transaction, the two protocols alternating in chunks so they see the same load; CPU from
   time.process_time (what a web worker spends beyond its HTTP stack): `service_*`.
2. The HTTP path: gunicorn, ONE sync worker (production settings), --clients agent processes POSTing with
   their node credentials for --http-seconds per protocol; the worker's CPU from /proc: `http_*`, the ratio
   `http_ratio` = protocol 2's samples per worker CPU-second over protocol 1's. Protocol 2's view is
   bench/usage_server.py's stand-in where the project has none yet (its usage half only; `http_v2_view`
   says which ran).
3. Storage: --growth-nodes nodes x --growth-hours of 10-s samples packed exactly as the ingest packs them,
   inserted in arrival order (every node's report of one interval, then the next) into one day's partition,
   VACUUM ANALYZE, bytes per GPU sample (table, index, TOAST); then the day downsampled to 1-minute rows by
   the upkeep (market.services.usage_storage) and their bytes per GPU-minute. Projected per 1,000 nodes: GB
   a day of 10-s rows, and the steady state (10-s rows of at most RAW_KEEP_DAYS + 1 days, 1-minute rows of
   retention_days).

Prints one JSON line. Targets (issue 36): 20,000 samples per web-worker CPU-second, at most 1 GB a day per
1,000 nodes.

    .venv/bin/python bench/usage.py                     # 1,000 nodes
    .venv/bin/python bench/usage.py --http-seconds 0    # no HTTP phase
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import django_on_fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path

GPUS = 8
LEASES_PER_NODE = 2
TICK_S = 10  # the agent's default sampling interval
WEB_APP = "bench-usage-web"


def _populate(nodes: int) -> tuple[list[tuple[int, list[str], list[int]]], list[str]]:
    """Nodes, GPUs and two running leases per node; returns (node id, GPU UUIDs, lease ids) per node and each
    node's credential (the secret its agent sends)."""
    from django.utils import timezone

    from accounts.models import Tenant, User
    from inventory.models import Gpu, GpuType, Node
    from market.models import Job, Lease, LeaseGpu, Round
    from nodeagent import credentials

    now = timezone.now()
    h100 = GpuType.objects.create(name="H100", memory_gb=80, reserve_price=1_000_000, max_price=50_000_000)
    user = User.objects.create(username="bench")
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    rnd = Round.objects.create(slot=now, period_s=300)
    secrets = [f"{credentials.NODE_PREFIX}bench-{i:06d}" for i in range(nodes)]
    ns = Node.objects.bulk_create(
        (
            Node(name=f"n{i:05d}", gpu_type=h100, credential_digest=credentials.digest(s), last_heartbeat=now)
            for i, s in enumerate(secrets)
        ),
        batch_size=5000,
    )
    gpus = Gpu.objects.bulk_create(
        (Gpu(node=n, index=s, uuid=f"GPU-{n.name}-{s}", model="H100") for n in ns for s in range(GPUS)),
        batch_size=5000,
    )
    jobs = Job.objects.bulk_create(
        (
            Job(
                tenant=tenant,
                submitter=user,
                name=f"j{i}",
                command="python train.py",
                gpus=GPUS // LEASES_PER_NODE,
                max_seconds=3600,
                grace_seconds=30,
                limits=[],
                submitted_at=now,
                state="running",
                wait_round=0,  # given: Job()'s default would query the rounds per job
            )
            for i in range(nodes * LEASES_PER_NODE)
        ),
        batch_size=5000,
    )
    leases = Lease.objects.bulk_create(
        (
            Lease(
                job=job,
                tenant=tenant,
                round=rnd,
                node=ns[i // LEASES_PER_NODE],
                gpu_type=h100,
                tier="S",
                preemptible=True,
                price=3_000_000,
                gpus=GPUS // LEASES_PER_NODE,
                max_seconds=3600,
                grace_seconds=30,
                hold_key=f"bench:{i}",
                state="running",
                started_at=now,
            )
            for i, job in enumerate(jobs)
        ),
        batch_size=5000,
    )
    per = GPUS // LEASES_PER_NODE
    LeaseGpu.objects.bulk_create(
        (LeaseGpu(lease=leases[g // per], gpu=gpu) for g, gpu in enumerate(gpus)), batch_size=5000
    )
    layout = [
        (
            n.pk,
            [g.uuid for g in gpus[i * GPUS : (i + 1) * GPUS]],
            [lease.pk for lease in leases[i * LEASES_PER_NODE : (i + 1) * LEASES_PER_NODE]],
        )
        for i, n in enumerate(ns)
    ]
    return layout, secrets


class Fleet:
    """A node's GPUs as NVML would show them, tick by tick: per GPU a job level of utilisation (a tenth of
    the GPUs idle), noise of a few % around it, memory that stays put, power from utilisation (mW, as NVML),
    the cumulative energy counter (mJ, as NVML) rising by it."""

    def __init__(self, nodes: int, seed: int = 36) -> None:
        self.rng = np.random.default_rng(seed)
        shape = (nodes, GPUS)
        self.level = np.where(self.rng.random(shape) < 0.1, 0.0, self.rng.uniform(40, 100, shape))
        self.mem = np.where(self.level > 0, self.rng.integers(8_000, 80_000, shape), 0).astype(np.float64)
        self.energy = self.rng.uniform(1e6, 1e9, shape).round(3)

    def ticks(self, node: int, count: int) -> tuple[np.ndarray, ...]:
        """(util, mem_mb, power_w, energy_j) of `count` ticks of one node, each ticks x GPUs."""
        level = self.level[node]
        util = np.clip(np.rint(level + self.rng.normal(0, 4, (count, GPUS)) * (level > 0)), 0, 100)
        mem = np.repeat(self.mem[node][None, :], count, axis=0)
        power = (np.rint((60 + 6 * util + self.rng.normal(0, 8, (count, GPUS))) * 1000) / 1000).clip(0, 6553)
        energy = self.energy[node] + np.cumsum(np.rint(power * TICK_S * 1000) / 1000, axis=0)
        self.energy[node] = energy[-1]
        return util, mem, power, energy


def _counters(leases: list[int], seq: int) -> list[dict[str, Any]]:
    return [
        {
            "lease": lease,
            "gpu_seconds": float(GPUS // LEASES_PER_NODE * TICK_S * seq),
            "energy_j": 1200.0 * seq,
            "util_avg": 95.1,
            "util_max": 100.0,
            "mem_avg_mb": 29800.0,
            "mem_max_mb": 30211.0,
            "samples": seq,
            "log_tail": f"step {seq} loss 0.{seq}\n",
        }
        for lease in leases
    ]


def _v2_body(fleet: Fleet, node: int, layout: Any, seq: int, t0: float, ticks: int, epoch: int) -> bytes:
    """Protocol 2's report as the agent sends it: gzip of the JSON."""
    _, uuids, leases = layout[node]
    util, mem, power, energy = fleet.ticks(node, ticks)
    per = GPUS // LEASES_PER_NODE
    t = [t0 + TICK_S * k for k in range(ticks)]
    body = {
        "protocol": 2,
        "boot_epoch": epoch,
        "seq": seq,
        "sent_at": datetime.fromtimestamp(t[-1], UTC).isoformat(),
        "gpus": [{"uuid": u, "healthy": True, "error": ""} for u in uuids],
        "running": leases,
        "usage": {
            "gpus": uuids,
            "t": t,
            "util": util.astype(int).tolist(),
            "mem_mb": mem.astype(int).tolist(),
            "power_w": power.tolist(),
            "energy_j": energy.tolist(),
            "lease": [[leases[g // per] for g in range(GPUS)]] * ticks,
            "foreign": [[0] * GPUS] * ticks,
            "processes": [
                {"gpu": u, "pid": 4242 + g, "used_mb": float(mem[-1, g]), "lease": leases[g // per]}
                for g, u in enumerate(uuids)
            ],
        },
        "leases": _counters(leases, seq),
    }
    return gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=6)


def _v1_body(fleet: Fleet, node: int, layout: Any, seq: int, t0: float, epoch: int) -> bytes:
    """Protocol 1's usage report as today's agent sends it: one tick, plain JSON."""
    _, uuids, leases = layout[node]
    util, mem, power, energy = fleet.ticks(node, 1)
    per = GPUS // LEASES_PER_NODE
    stamp = datetime.fromtimestamp(t0, UTC).isoformat()
    body = {
        "boot_epoch": epoch,
        "seq": seq,
        "sent_at": stamp,
        "gpus": [
            {
                "uuid": u,
                "at": stamp,
                "healthy": True,
                "util_pct": float(util[0, g]),
                "mem_used_mb": float(mem[0, g]),
                "power_w": float(power[0, g]),
                "energy_j": float(energy[0, g]),
                "processes": [{"pid": 4242 + g, "used_mb": float(mem[0, g]), "lease": leases[g // per]}],
            }
            for g, u in enumerate(uuids)
        ],
        "leases": _counters(leases, seq),
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _log(message: str) -> None:
    print(f"bench/usage: {message}", file=sys.stderr, flush=True)


def _ms(values: list[float], q: float) -> float:
    """The q-quantile of `values` (seconds) in milliseconds, nearest rank."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else 0.0


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux /proc; fields 14 and 15 of its stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_backend() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


# 1. The service path.


def _as_v1_view(node_id: int, raw: bytes) -> int:
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    report = parse_report(json.loads(raw))
    usage_ingest(reports=[(node_id, report)])
    return len(report.gpus)


def _as_v2_view(node_id: int, raw: bytes) -> int:
    from nodeagent.services.usage import report_ingest
    from nodeagent.services.usage_parse import parse_leases, parse_samples

    body = json.loads(gzip.decompress(raw))
    samples = parse_samples(body["usage"])
    report_ingest(
        node_id=node_id,
        boot_epoch=body["boot_epoch"],
        seq=body["seq"],
        sent_at=datetime.fromisoformat(body["sent_at"]),
        samples=samples,
        leases=parse_leases(body["leases"]),
    )
    return samples.ticks * len(samples.gpus)


def _service_phase(layout: Any, args: argparse.Namespace) -> dict[str, Any]:
    fleet = Fleet(len(layout))
    start = time.time() - 3600
    n = args.reports
    v1 = [
        (layout[i % len(layout)][0], _v1_body(fleet, i % len(layout), layout, i // len(layout) + 1,
                                             start + TICK_S * (i // len(layout)), 11))
        for i in range(n)
    ]  # fmt: skip
    v2 = [
        (layout[i % len(layout)][0], _v2_body(fleet, i % len(layout), layout, i // len(layout) + 1,
                                             start + TICK_S * args.ticks * (i // len(layout)), args.ticks, 12))
        for i in range(n)
    ]  # fmt: skip
    backend = _own_backend()
    cpu = {"v1": 0.0, "v2": 0.0}
    db = {"v1": 0.0, "v2": 0.0}
    samples = {"v1": 0, "v2": 0}
    latencies: dict[str, list[float]] = {"v1": [], "v2": []}
    chunk = 100
    for c in range(0, n, chunk):
        for name, bodies, call in (("v1", v1, _as_v1_view), ("v2", v2, _as_v2_view)):
            cpu0, db0 = time.process_time(), _cpu_s(backend)
            for node_id, raw in bodies[c : c + chunk]:
                began = time.perf_counter()
                samples[name] += call(node_id, raw)
                latencies[name].append(time.perf_counter() - began)
            cpu[name] += time.process_time() - cpu0
            db[name] += _cpu_s(backend) - db0
    out: dict[str, Any] = {}
    for name in ("v1", "v2"):
        out[f"service_{name}_samples_per_cpu_s"] = round(samples[name] / cpu[name])
        out[f"service_{name}_cpu_ms_per_report"] = round(cpu[name] * 1000 / n, 3)
        out[f"service_{name}_db_cpu_ms_per_report"] = round(db[name] * 1000 / n, 3)
        out[f"service_{name}_p50_ms"] = _ms(latencies[name], 0.5)
    out["service_ratio"] = round(out["service_v2_samples_per_cpu_s"] / out["service_v1_samples_per_cpu_s"], 2)
    out["v2_body_bytes"] = round(sum(len(b) for _, b in v2) / n)
    out["v1_body_bytes"] = round(sum(len(b) for _, b in v1) / n)
    return out


# 2. The HTTP path: one gunicorn sync worker, agents as client processes.


def _client(port: int, jobs: list[tuple[str, str, bytes]], deadline: float, out: Any) -> None:
    """POST each (credential, path, body) in turn until the deadline; puts (latencies, failures, first)."""
    import http.client

    latencies: list[float] = []
    failures, first = 0, ""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for secret, route, body in jobs:
        if time.perf_counter() >= deadline:
            break
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        if route.endswith("/report"):
            headers["Content-Encoding"] = "gzip"
        began = time.perf_counter()
        try:
            conn.request("POST", route, body=body, headers=headers)
            response = conn.getresponse()
            reply = response.read()
        except (OSError, http.client.HTTPException) as exc:
            failures, first = failures + 1, first or repr(exc)
            conn.close()
            continue
        if response.status != 200:
            failures, first = failures + 1, first or f"{response.status}: {reply[:500]!r}"
            continue
        latencies.append(time.perf_counter() - began)
    conn.close()
    out.put((latencies, failures, first))


def _drive(ctx: Any, port: int, jobs: list[Any], clients: int, seconds: float) -> tuple[list[float], float]:
    out = ctx.Queue()
    deadline = time.perf_counter() + seconds
    procs = [
        ctx.Process(target=_client, args=(port, jobs[c::clients], deadline, out)) for c in range(clients)
    ]
    began = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join()
    failures = sum(r[1] for r in results)
    if failures:
        raise SystemExit(
            f"bench/usage: {failures} request(s) failed; first: {next(r[2] for r in results if r[2])}"
        )
    return [x for r in results for x in r[0]], elapsed


def _http_phase(url: str, layout: Any, secrets: list[str], args: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing
    import socket
    import subprocess

    sys.path.insert(0, str(ROOT / "bench"))
    from api import _server_env, _stop
    from django.db import connection, connections

    fleet = Fleet(len(layout), seed=37)
    # As many reports as the phase can send at the worker's pace, and some: a fresh boot epoch each.
    need = int(args.http_seconds * 2000)
    start = time.time() - 1800
    nodes = len(layout)
    jobs = {
        "v1": [
            (secrets[i % nodes], "/api/v1/agent/usage",
             _v1_body(fleet, i % nodes, layout, i // nodes + 1, start + TICK_S * (i // nodes), 21))
            for i in range(need)
        ],
        "v2": [
            (secrets[i % nodes], "/api/v1/agent/report",
             _v2_body(fleet, i % nodes, layout, i // nodes + 1, start + TICK_S * args.ticks * (i // nodes), args.ticks, 22))
            for i in range(need // args.ticks + args.clients)
        ],
    }  # fmt: skip
    connections.close_all()
    os.environ.update(_server_env(url))
    os.environ["PGAPPNAME"] = WEB_APP
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        fd = sock.fileno()
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "usage_server:application",
            "--pythonpath",
            str(ROOT / "bench"),
        ]
        cmd += ["--bind", f"fd://{fd}", "--workers", "1", "--worker-class", "sync", "--log-level", "warning"]
        server = subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), pass_fds=[fd], stdout=sys.stderr)
    os.environ.pop("PGAPPNAME", None)
    out: dict[str, Any] = {}
    try:
        ctx = multiprocessing.get_context("fork")
        warm = ctx.Queue()
        for name in ("v1", "v2"):  # warm-up, unmeasured: the connection, the URL resolver, the imports
            _client(port, jobs[name][-args.clients :], time.perf_counter() + 60, warm)
            _, failures, first = warm.get()
            if failures:
                raise SystemExit(f"bench/usage: warm-up {name} failed: {first}")
            jobs[name] = jobs[name][: -args.clients]
        worker = int(Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()[0])
        with connection.cursor() as cur:
            cur.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [WEB_APP])
            backend = int(cur.fetchone()[0])
        connection.close()
        for name in ("v1", "v2"):
            cpu, db = _cpu_s(worker), _cpu_s(backend)
            lat, elapsed = _drive(ctx, port, jobs[name], args.clients, args.http_seconds)
            worker_s, db_s = _cpu_s(worker) - cpu, _cpu_s(backend) - db
            per = GPUS * (1 if name == "v1" else args.ticks)
            out[f"http_{name}_samples_per_worker_cpu_s"] = round(len(lat) * per / worker_s)
            out[f"http_{name}_worker_cpu_ms_per_report"] = round(worker_s * 1000 / len(lat), 3)
            out[f"http_{name}_db_cpu_ms_per_report"] = round(db_s * 1000 / len(lat), 3)
            out[f"http_{name}_samples_per_s"] = round(len(lat) * per / elapsed)
            out[f"http_{name}_p50_ms"] = _ms(lat, 0.5)
            out[f"http_{name}_p99_ms"] = _ms(lat, 0.99)
            out[f"http_{name}_reports"] = len(lat)
    finally:
        _stop(server)
    out["http_ratio"] = round(
        out["http_v2_samples_per_worker_cpu_s"] / out["http_v1_samples_per_worker_cpu_s"], 2
    )
    sys.path.insert(0, str(ROOT / "bench"))
    import usage_server  # noqa: F401 - only to say which view ran

    out["http_v2_view"] = "bench stand-in (bench/usage_server.py)" if usage_server.STAND_IN else "project"
    return out


# 3. Storage.


def _growth(layout: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One closed day's partition filled with --growth-nodes x --growth-hours of 10-s samples, packed as the
    ingest packs them, in arrival order; then downsampled by the upkeep."""
    from django.db import connection, transaction

    from market.models import UsageColumns, UsageMinute, UsageSample
    from market.models.usage import RAW_KEEP_DAYS
    from market.models.usage_blob import pack
    from market.selectors.policy import market_policy
    from market.selectors.usage_samples import day_start
    from market.services.usage_storage import partition_ensure, usage_storage_maintain

    nodes = layout[: args.growth_nodes]
    day = day_start(datetime.now(UTC)) - timedelta(days=RAW_KEEP_DAYS + 2)
    sample_t, minute_t = UsageSample._meta.db_table, UsageMinute._meta.db_table
    with transaction.atomic():
        partition_ensure(sample_t, day)
    columns = {
        node_id: UsageColumns.objects.get_or_create(node_id=node_id, uuids=",".join(uuids))[0].pk
        for node_id, uuids, _ in nodes
    }
    fleet = Fleet(len(nodes), seed=38)
    per = GPUS // LEASES_PER_NODE
    reports = int(args.growth_hours * 3600 / TICK_S / args.ticks)
    rows = 0
    t_ms = (np.arange(args.ticks) * TICK_S * 1000).astype(np.uint32)
    with connection.cursor() as cur:
        for r in range(reports):  # arrival order: every node's report of one interval, then the next
            at = day + timedelta(seconds=r * args.ticks * TICK_S)
            with cur.copy(
                f"COPY {sample_t} (node_id, boot_epoch, seq, at, ticks, columns_id, data) FROM STDIN"
            ) as copy:
                for k, (node_id, _, leases) in enumerate(nodes):
                    util, mem, power, energy = fleet.ticks(k, args.ticks)
                    lease = np.array([[leases[g // per] for g in range(GPUS)]] * args.ticks, dtype=np.int64)
                    data = pack(t_ms=t_ms, util=util, mem_mb=mem, power_w=power, energy_j=energy, lease=lease,
                                foreign=np.zeros_like(lease))  # fmt: skip
                    copy.write_row((node_id, 1, r + 1, at, args.ticks, columns[node_id], data))
                    rows += 1
        part = f"{sample_t}_p{day:%Y%m%d}"
        cur.execute(f"VACUUM ANALYZE {part}")
        cur.execute(
            "SELECT pg_total_relation_size(%s), pg_relation_size(%s), pg_indexes_size(%s)", [part] * 3
        )
        raw_bytes, heap, index = cur.fetchone()
    samples = rows * args.ticks * GPUS
    began = time.perf_counter()
    stats = usage_storage_maintain()
    downsample_s = time.perf_counter() - began
    with connection.cursor() as cur:
        part = f"{minute_t}_p{day:%Y%m%d}"
        cur.execute(f"VACUUM ANALYZE {part}")
        cur.execute("SELECT pg_total_relation_size(%s)", [part])
        minute_bytes = cur.fetchone()[0]
    gpu_minutes = len(nodes) * GPUS * round(args.growth_hours * 60)
    per_sample = raw_bytes / samples
    per_minute = minute_bytes / gpu_minutes
    daily_samples = 1000 * GPUS * 86_400 // TICK_S
    raw_day = daily_samples * per_sample
    minute_day = 1000 * GPUS * 1440 * per_minute
    retention = market_policy().retention_days
    return {
        "growth_nodes": len(nodes),
        "growth_hours": args.growth_hours,
        "growth_rows": rows,
        "bytes_per_sample": round(per_sample, 2),
        "bytes_per_sample_heap": round(heap / samples, 2),
        "bytes_per_sample_index": round(index / samples, 2),
        "bytes_per_row": round(raw_bytes / rows),
        "gb_per_day_1000_nodes": round(raw_day / 1e9, 3),
        "bytes_per_gpu_minute": round(per_minute, 2),
        "minute_gb_per_day_1000_nodes": round(minute_day / 1e9, 3),
        "retention_days": retention,
        # At most RAW_KEEP_DAYS + 1 days of 10-s rows (today's, the days still open, until the upkeep's pass)
        # and retention_days of minutes.
        "steady_gb_1000_nodes": round(((RAW_KEEP_DAYS + 1) * raw_day + retention * minute_day) / 1e9, 2),
        "downsampled_days": stats.days_downsampled,
        "downsample_s": round(downsample_s, 2),
        "downsample_rows_per_s": round(rows / downsample_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=3, help="ticks per protocol 2 report (3: 30 s pacing)")
    parser.add_argument("--reports", type=int, default=2000, help="reports per protocol, service path")
    parser.add_argument("--http-seconds", type=float, default=15.0, help="per protocol (0: skip HTTP)")
    parser.add_argument("--clients", type=int, default=2, help="concurrent agents posting")
    parser.add_argument("--growth-nodes", type=int, default=500)
    parser.add_argument("--growth-hours", type=float, default=2.0)
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    url = os.environ.get(
        "BENCH_USAGE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage"
    )
    django_on_fresh_database(url)
    started = time.perf_counter()
    layout, secrets = _populate(args.nodes)
    _log(f"{args.nodes} nodes populated in {time.perf_counter() - started:.0f} s")
    service = _service_phase(layout, args)
    _log(f"service path: {service}")
    http = _http_phase(url, layout, secrets, args) if args.http_seconds else {}
    if http:
        _log(f"HTTP path: {http}")
    growth = _growth(layout, args)  # a day of its own: its partitions hold nothing the phases above wrote
    print(
        json.dumps(
            {
                "bench": "usage",
                "nodes": args.nodes,
                "ticks_per_report": args.ticks,
                "gpus": GPUS,
                **service,
                **http,
                **growth,
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            }
        )
    )


if __name__ == "__main__":
    main()
