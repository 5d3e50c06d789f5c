"""Usage ingestion on PostgreSQL at fleet scale: 12,500 nodes of 8 GPUs reporting every 10 s (10,000 GPU
samples/s), with the retention prune running meanwhile.

Builds a fresh database (BENCH_USAGE_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage: dropped and re-created) with --nodes registered
nodes of 8 GPUs, each running two 4-GPU leases, and reports shaped exactly like the agent's HTTP body (a JSON
dict: 8 GPU samples with their processes, 2 lease counters). Before anything is timed it seeds reports that
pass the policy's retention period (MarketPolicy.retention_days) at the fleet's rate (--nodes / 10 a second)
over the next --expire-seconds, and starts the policy's prune (market.services.retention, the hourly beat
task's body) looping in its own process: the steady state, where the prune deletes as fast as the fleet sends.
Then, timed:

1. the service alone, batched: --rounds reports per node through `parse_report` + `usage_ingest`, --batch
   reports per call; the baseline, batch by batch in the same run, is the same report rows written with a raw
   COPY into a copy of the report table (same columns and indexes): `ratio`;
2. the service alone as the view calls it, one report per call (--single reports): `single_*`;
3. the real HTTP path: gunicorn with ONE sync worker (bench/api.py's `_serve`, production settings), --clients
   agent processes POSTing /api/v1/agent/usage with their node credentials for --http-seconds: samples/s per
   web process and p50/p99 per report; `http_ratio_to_single` against (2).

Then the database growth: the report table's bytes per report after VACUUM FULL (live data), times the
fleet's reports per day (nodes x 8,640), and times retention_days for what the prune keeps; lease counters
(one row per lease and node, never pruned: they are what the lease was billed from) per row.

Prints one JSON line: {"bench": "usage", "samples_per_s": ..., "copy_samples_per_s": ..., "ratio": ...,
"http_samples_per_s": ..., "http_p50_ms": ..., "http_p99_ms": ..., "gb_per_day_12500_nodes": ..., ...}.
Target (issue 29): 20,000 samples/s per web process.

    .venv/bin/python bench/usage.py                                 # 12,500 nodes
    .venv/bin/python bench/usage.py --nodes 1000 --http-seconds 10  # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import django_on_fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path

GPUS = 8
LEASES_PER_NODE = 2
REPORT_S = 10  # the agent's default --interval: one report per node every 10 s


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


def _report(seq: int, uuids: list[str], leases: list[int], at: datetime, epoch: int = 1) -> dict[str, Any]:
    """One report as the agent's HTTP body parses: plain JSON types, times as ISO strings."""
    stamp = at.isoformat()
    per = GPUS // LEASES_PER_NODE
    return {
        "boot_epoch": epoch,
        "seq": seq,
        "sent_at": stamp,
        "gpus": [
            {
                "uuid": uuid,
                "at": stamp,
                "healthy": True,
                "util_pct": 90 + s % 10,
                "mem_used_mb": 30211.0 + s,
                "power_w": 301.5,
                "energy_j": 81234.5 * seq,
                "processes": [{"pid": 4242 + s, "used_mb": 30000.0, "lease": leases[s // per]}],
            }
            for s, uuid in enumerate(uuids)
        ],
        "leases": [
            {
                "lease": lease,
                "gpu_seconds": float(per * seq),
                "energy_j": 1200.0 * seq,
                "util_avg": 95.1,
                "util_max": 100.0,
                "mem_avg_mb": 29800.0,
                "mem_max_mb": 30211.0,
                "samples": seq,
                "log_tail": f"step {seq} loss 0.{seq}\n",
            }
            for lease in leases
        ],
    }


def _copy(connection: Any, batch: list[tuple[int, dict[str, Any]]]) -> None:
    """The baseline: the batch's report rows by a raw COPY, in a transaction of its own like an ingest."""
    from django.db import transaction

    received = datetime.now(UTC)
    with (
        transaction.atomic(),
        connection.cursor() as cur,
        cur.copy(
            "COPY bench_copy (node_id, boot_epoch, seq, sent_at, received_at, samples) FROM STDIN"
        ) as copy,
    ):
        for node_id, body in batch:
            copy.write_row(
                (
                    node_id,
                    body["boot_epoch"],
                    body["seq"],
                    body["sent_at"],
                    received,
                    json.dumps(body["gpus"], separators=(",", ":")),
                )
            )


def _agent_cpu(seconds: float = 20.0) -> dict[str, Any]:
    """bench/agent.py's JSON line (it starts its own agent and fake server)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "agent.py"), "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _as_the_view(node_id: int, body: dict[str, Any]) -> bool:
    """What UsageView does with a body once the node is authenticated; whether the report was new."""
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    return bool(usage_ingest(reports=[(node_id, parse_report(body))]))


def _log(message: str) -> None:
    print(f"bench/usage: {message}", file=sys.stderr, flush=True)


def _ms(values: list[float], q: float) -> float:
    """The q-quantile of `values` (seconds) in milliseconds, nearest rank."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else 0.0


# The retention job, run beside the ingestion: the policy's prune (market.services.retention), looping.


def _seed_expiring_reports(per_s: float, seconds: float, days: int) -> int:
    """Reports that pass the policy's retention at `per_s` a second over the next `seconds` (one real report's
    samples each): the prune's steady state, where it deletes what the fleet sent `days` ago as fast as the
    fleet sends. Returns how many."""
    from django.db import connection

    from market.models import UsageReport

    table, count = UsageReport._meta.db_table, int(per_s * seconds)
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} (node_id, boot_epoch, seq, sent_at, received_at, samples) "
            f"SELECT (SELECT min(node_id) FROM {table}), 0, g, at, at, (SELECT samples FROM {table} LIMIT 1) "
            f"FROM generate_series(1, %s) AS g, "
            f"LATERAL (SELECT now() - interval '{days} days' + g * interval '1 second' / %s AS at) AS t",
            [count, per_s],
        )
    return count


def _prune_loop(stop: Any, out: Any) -> None:
    """In its own process: prune until told to stop; reports (rows deleted, seconds spent pruning)."""
    from django.db import connections

    connections.close_all()  # the parent's, inherited by fork: never used here
    from market.services.retention import retention_prune

    deleted, busy = 0, 0.0
    while not stop.is_set():
        started = time.perf_counter()
        deleted += retention_prune().usage_reports
        busy += time.perf_counter() - started
        stop.wait(0.5)
    out.put((deleted, busy))


# The HTTP path: one gunicorn sync worker (bench/api.py's _serve), agents as client processes.


def _client(port: int, jobs: list[tuple[str, bytes]], deadline: float, out: Any) -> None:
    """POST each (credential, body) in turn until the deadline; puts (latencies, failures, first failure).
    A job without a credential is a GET /healthz instead (the floor: Django's least request)."""
    import http.client

    latencies: list[float] = []
    failures, first = 0, ""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for secret, body in jobs:
        if time.perf_counter() >= deadline:
            break
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        began = time.perf_counter()
        try:
            if secret:
                conn.request("POST", "/api/v1/agent/usage", body=body, headers=headers)
            else:
                conn.request("GET", "/healthz")
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


def _http_phase(
    url: str, layout: list[tuple[int, list[str], list[int]]], secrets: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Reports from every node (boot epoch 2) through one gunicorn worker, `--clients` at a time."""
    import multiprocessing
    import socket

    sys.path.insert(0, str(ROOT / "bench"))
    from api import _serve, _server_env, _stop
    from django.db import connections

    connections.close_all()
    os.environ.update(_server_env(url))
    start = datetime.now(UTC)
    bodies = [
        (secrets[i], json.dumps(_report(r + 1, uuids, leases, start + timedelta(seconds=r), 2)).encode())
        for r in range(args.http_rounds)
        for i, (_, uuids, leases) in enumerate(layout)
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        if args.synchronous_commit != "on":  # the server's sessions only (libpq reads PGOPTIONS)
            os.environ["PGOPTIONS"] = f"-c synchronous_commit={args.synchronous_commit}"
        os.environ["PGAPPNAME"] = WEB_APP  # names the worker's database session in pg_stat_activity
        server = _serve(sock, 1)
        os.environ.pop("PGOPTIONS", None)
        os.environ.pop("PGAPPNAME", None)
    try:
        ctx = multiprocessing.get_context("fork")
        # Warm-up (unmeasured): the worker opens its connection, builds its URL resolver.
        warm = ctx.Queue()
        _client(port, [(s, b) for s, b in bodies[-args.clients :]], time.perf_counter() + 30, warm)
        lat, failures, first = warm.get()
        if failures:
            raise SystemExit(f"bench/usage: warm-up request failed: {first}")
        bodies = bodies[: -args.clients]
        worker, backend = _children(server.pid)[0], _backend()
        cpu = _cpu_s(worker), _cpu_s(backend)
        latencies, elapsed = _drive(ctx, port, bodies, args.clients, args.http_seconds)
        worker_s, backend_s = _cpu_s(worker) - cpu[0], _cpu_s(backend) - cpu[1]
        cpu_floor = _cpu_s(worker)
        # The same clients, as long, on GET /healthz: the least a request to this worker costs (no database,
        # no authentication). Reports per second cannot beat it: it is the HTTP stack's own ceiling.
        floor, floor_elapsed = _drive(ctx, port, [("", b"")] * 10**6, args.clients, args.http_seconds / 2)
        floor_s = _cpu_s(worker) - cpu_floor
    finally:
        _stop(server)
    return {
        "http_samples_per_s": round(len(latencies) * GPUS / elapsed),
        "http_reports": len(latencies),
        "http_p50_ms": _ms(latencies, 0.5),
        "http_p99_ms": _ms(latencies, 0.99),
        # CPU per report, which a shared machine's load hardly moves: the web process's own and its database
        # session's; and what one web process delivers when it has a core to itself (8 samples per report).
        "http_worker_cpu_ms_per_report": round(worker_s * 1000 / len(latencies), 3),
        "http_db_cpu_ms_per_report": round(backend_s * 1000 / len(latencies), 3),
        "http_samples_per_worker_cpu_s": round(len(latencies) * GPUS / worker_s),
        "healthz_worker_cpu_ms": round(floor_s * 1000 / len(floor), 3),
        "healthz_per_s": round(len(floor) / floor_elapsed),
        "healthz_p50_ms": _ms(floor, 0.5),
    }


WEB_APP = "bench-usage-web"


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (Linux /proc; fields 14 and 15 of its stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backend() -> int:
    """The process id of the web worker's PostgreSQL session (same machine)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [WEB_APP])
        rows = cur.fetchall()
    connection.close()
    if len(rows) != 1:
        raise SystemExit(f"bench/usage: expected one database session of the web worker, found {len(rows)}")
    return int(rows[0][0])


def _drive(
    ctx: Any, port: int, jobs: list[tuple[str, bytes]], clients: int, seconds: float
) -> tuple[list[float], float]:
    """`clients` processes sending their share of `jobs` for `seconds`: (latencies, elapsed seconds)."""
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


def _commit_ms(rounds: int = 200) -> float:
    """The median time of a one-row INSERT and its COMMIT on this database: the disk's flush, which every
    report's transaction pays once (with synchronous_commit on). It puts the other figures in scale on
    another machine."""
    from django.db import connection

    times = []
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE bench_commit (x integer)")
        for _ in range(rounds):
            started = time.perf_counter()
            cur.execute("INSERT INTO bench_commit VALUES (1)")  # autocommit: its own transaction
            times.append(time.perf_counter() - started)
        cur.execute("DROP TABLE bench_commit")
    return _ms(times, 0.5)


def _growth(nodes: int, retention_days: int) -> dict[str, Any]:
    """Bytes per report kept (table, indexes, TOAST, after VACUUM so the figure is live data) and the fleet's
    daily volume at one report per node every REPORT_S seconds; what retention keeps is retention_days of it."""
    from django.db import connection

    from market.models import LeaseUsage, UsageReport

    sizes = {}
    with connection.cursor() as cur:
        for model in (UsageReport, LeaseUsage):
            table = model._meta.db_table
            cur.execute(f"VACUUM FULL ANALYZE {table}")  # live data: what the next rows reuse
            cur.execute(f"SELECT pg_total_relation_size('{table}'), (SELECT count(*) FROM {table})")
            size, rows = cur.fetchone()
            sizes[table] = (int(size), int(rows))
    report_bytes, reports = sizes[UsageReport._meta.db_table]
    per_report = report_bytes / reports
    lease_bytes, lease_rows = sizes[LeaseUsage._meta.db_table]
    per_day = 86_400 // REPORT_S
    out: dict[str, Any] = {
        "bytes_per_report": round(per_report),
        "bytes_per_sample": round(per_report / GPUS),
        "bytes_per_lease_usage_row": round(lease_bytes / lease_rows),
        "retention_days": retention_days,
    }
    for fleet in (1_000, 12_500):
        daily = fleet * per_day * per_report
        out[f"gb_per_day_{fleet}_nodes"] = round(daily / 1e9, 1)
        out[f"gb_kept_{fleet}_nodes"] = round(daily * retention_days / 1e9, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--rounds", type=int, default=2, help="reports per node through the service")
    parser.add_argument("--batch", type=int, default=500, help="reports per ingest call")
    parser.add_argument(
        "--single", type=int, default=5_000, help="reports ingested one per call (the view's way)"
    )
    parser.add_argument("--http-seconds", type=float, default=20.0, help="length of the HTTP phase (0: skip)")
    parser.add_argument("--http-rounds", type=int, default=3, help="reports per node prepared for HTTP")
    parser.add_argument("--clients", type=int, default=3, help="concurrent agents posting (client processes)")
    parser.add_argument(
        "--expire-seconds",
        type=float,
        default=240.0,
        help="how long the seeded old reports keep the prune busy",
    )
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="the web worker's PostgreSQL synchronous_commit (off: what the flush per report costs)",
    )
    parser.add_argument(
        "--agent-seconds",
        type=float,
        default=0.0,
        help="how long bench/agent.py measures the agent (0: skip)",
    )
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # not a line per prune
    url = os.environ.get(
        "BENCH_USAGE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage"
    )
    django_on_fresh_database(url)
    import multiprocessing

    from django.db import connection, connections

    from market.models import LeaseUsage, UsageReport
    from market.selectors.policy import market_policy
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    started_all = time.perf_counter()
    layout, secrets = _populate(args.nodes)
    _log(f"{args.nodes} nodes populated in {time.perf_counter() - started_all:.0f} s")
    retention_days = market_policy().retention_days
    start = datetime.now(UTC)
    payloads = [
        (node_id, _report(r + 1, uuids, leases, start + timedelta(seconds=r)))
        for r in range(args.rounds)
        for node_id, uuids, leases in layout
    ]
    samples = sum(len(p["gpus"]) for _, p in payloads)

    table = UsageReport._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"CREATE TABLE bench_copy (LIKE {table} INCLUDING ALL)")
        cur.execute("ANALYZE")

    # The retention job beside everything timed below, on reports seeded past the policy's retention (copies
    # of one real report, stored first; the timed batches meet it again as a repeat).
    usage_ingest(reports=[(node_id, parse_report(body)) for node_id, body in payloads[:1]])
    expiring = _seed_expiring_reports(args.nodes / REPORT_S, args.expire_seconds, retention_days)
    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    stop, pruned = ctx.Event(), ctx.Queue()
    pruner = ctx.Process(target=_prune_loop, args=(stop, pruned))
    pruner.start()

    # Each batch is ingested, then its rows COPied, one after the other: on a shared machine both measures
    # see the same load, which keeps their ratio steady while the absolute figures move.
    ingest_s = copy_s = 0.0
    for i in range(0, len(payloads), args.batch):
        batch = payloads[i : i + args.batch]
        started = time.perf_counter()
        usage_ingest(reports=[(node_id, parse_report(body)) for node_id, body in batch])
        ingest_s += time.perf_counter() - started
        started = time.perf_counter()
        _copy(connection, batch)
        copy_s += time.perf_counter() - started
    assert UsageReport.objects.filter(boot_epoch=1).count() == len(payloads)
    assert LeaseUsage.objects.filter(samples=args.rounds).count() == args.nodes * LEASES_PER_NODE

    # The view's way: one report per call (boot epoch 3), each its own transaction.
    single = [
        (node_id, _report(r + 1, uuids, leases, start + timedelta(seconds=r), 3))
        for r in range(-(-args.single // len(layout)))
        for node_id, uuids, leases in layout
    ][: args.single]
    per_call: list[float] = []
    for node_id, body in single:
        started = time.perf_counter()
        _as_the_view(node_id, body)
        per_call.append(time.perf_counter() - started)

    commit_ms = _commit_ms()
    http = _http_phase(url, layout, secrets, args) if args.http_seconds else {}

    stop.set()
    deleted, prune_busy = pruned.get()
    pruner.join()
    # What had passed the retention period and was not deleted yet when the run ended (0: the prune kept up).
    backlog = UsageReport.objects.filter(
        received_at__lt=datetime.now(UTC) - timedelta(days=retention_days)
    ).count()
    connections.close_all()
    growth = _growth(args.nodes, retention_days)

    rate, copy_rate = samples / ingest_s, samples / copy_s
    single_rate = len(single) * GPUS / sum(per_call)
    agent = _agent_cpu(args.agent_seconds) if args.agent_seconds else None
    fleet_rate = args.nodes * GPUS / REPORT_S
    print(
        json.dumps(
            {
                "bench": "usage",
                "nodes": args.nodes,
                "fleet_samples_per_s": round(fleet_rate),
                # The service alone, batched (--batch reports per call) against a raw COPY of the same rows.
                "samples_per_s": round(rate),
                "copy_samples_per_s": round(copy_rate),
                "ratio": round(rate / copy_rate, 3),
                "samples": samples,
                "batch": args.batch,
                # The service alone as the view calls it: one report per call.
                "single_samples_per_s": round(single_rate),
                "single_p50_ms": _ms(per_call, 0.5),
                "single_p99_ms": _ms(per_call, 0.99),
                # Through HTTP: one gunicorn sync worker, --clients agents posting; against the service alone.
                **http,
                "http_ratio_to_single": round(http["http_samples_per_s"] / single_rate, 3) if http else None,
                "clients": args.clients,
                "synchronous_commit": args.synchronous_commit,
                "commit_ms": commit_ms,
                # The retention job, running the whole time: reports deleted and how fast (the fleet makes
                # fleet_samples_per_s / 8 reports a second; the prune must delete as many).
                "expired_reports": expiring,
                "pruned_reports": deleted,
                "prune_reports_per_s": round(deleted / prune_busy) if prune_busy else None,
                "prune_backlog": backlog,
                **growth,
                "agent_cpu_pct_of_core": None if agent is None else agent["cpu_pct_of_core"],
            }
        )
    )


if __name__ == "__main__":
    main()
