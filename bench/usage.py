"""Usage ingestion on PostgreSQL: reports from 1,000 nodes of 8 GPUs, in batches, through the ingest service.

Builds a fresh database (BENCH_USAGE_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage: dropped and re-created) with 1,000 registered nodes of
8 GPUs, each running two 4-GPU leases. Then, for each of --rounds rounds, every node sends one report shaped
exactly like the agent's HTTP body (a JSON dict: 8 GPU samples with their processes, 2 lease counters). The
reports go through what the view calls, `parse_report` and `usage_ingest`, --batch reports per call (the
timed part). The baseline, in the same run, batch by batch: the same report rows written with a raw COPY into
a copy of the report table (same columns and indexes), serialising the samples the same way.

Prints one JSON line: {"bench": "usage", "samples_per_s": ..., "copy_samples_per_s": ..., "ratio": ...}
plus the sample and report counts and `agent_cpu_pct_of_core`, the agent's own CPU cost as bench/agent.py
measures it (run here as a subprocess; --agent-seconds 0 skips it). Targets (issue 16): samples_per_s >= 20,000,
ratio >= 0.25, agent under 2% of one core.
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


def _populate(nodes: int) -> list[tuple[int, list[str], list[int]]]:
    """Nodes, GPUs and two running leases per node; returns (node id, GPU UUIDs, lease ids) per node."""
    from django.utils import timezone

    from accounts.models import Tenant, User
    from market.models import GpuType, Job, Lease, LeaseGpu, Round
    from nodeagent.models import Gpu, Node

    now = timezone.now()
    h100 = GpuType.objects.create(name="H100", memory_gb=80, reserve_price=1_000_000, max_price=50_000_000)
    user = User.objects.create(username="bench")
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    rnd = Round.objects.create(slot=now, period_s=300)
    ns = Node.objects.bulk_create(
        Node(name=f"n{i:04d}", gpu_type=h100, credential_digest=f"{i:064x}", last_heartbeat=now)
        for i in range(nodes)
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
    return [
        (
            n.pk,
            [g.uuid for g in gpus[i * GPUS : (i + 1) * GPUS]],
            [lease.pk for lease in leases[i * LEASES_PER_NODE : (i + 1) * LEASES_PER_NODE]],
        )
        for i, n in enumerate(ns)
    ]


def _report(seq: int, uuids: list[str], leases: list[int], at: datetime) -> dict[str, Any]:
    """One report as the agent's HTTP body parses: plain JSON types, times as ISO strings."""
    stamp = at.isoformat()
    per = GPUS // LEASES_PER_NODE
    return {
        "boot_epoch": 1,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=10, help="reports per node")
    parser.add_argument("--batch", type=int, default=500, help="reports per ingest call")
    parser.add_argument(
        "--agent-seconds",
        type=float,
        default=20.0,
        help="how long bench/agent.py measures the agent (0: skip)",
    )
    args = parser.parse_args()
    url = os.environ.get(
        "BENCH_USAGE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_usage"
    )
    django_on_fresh_database(url)
    from django.db import connection

    from nodeagent.models import LeaseUsage, UsageReport
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    layout = _populate(args.nodes)
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
    assert UsageReport.objects.count() == len(payloads)
    assert LeaseUsage.objects.filter(samples=args.rounds).count() == args.nodes * LEASES_PER_NODE

    rate, copy_rate = samples / ingest_s, samples / copy_s
    agent = _agent_cpu() if args.agent_seconds else None
    print(
        json.dumps(
            {
                "bench": "usage",
                "samples_per_s": round(rate),
                "copy_samples_per_s": round(copy_rate),
                "ratio": round(rate / copy_rate, 3),
                "samples": samples,
                "reports": len(payloads),
                "batch": args.batch,
                # The other side's cost, from bench/agent.py: one agent sampling 8 simulated GPUs every second.
                "agent_cpu_pct_of_core": None if agent is None else agent["cpu_pct_of_core"],
            }
        )
    )


if __name__ == "__main__":
    main()
