"""Data growth: database bytes per thousand rounds, before and after the retention prune.

Builds a fresh database (BENCH_RETENTION_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/gpumarket_bench_retention: dropped and re-created) with a backlog of pending
jobs larger than the cluster (one node of 8 GPUs), so after the first round every round freezes the whole
backlog and writes one outcome per bid: the growth the prune exists for. It runs --rounds real rounds
(market.services.rounds, slots spaced one period apart in the past), measures the tables rounds write to,
prunes with a retention of one day (every round is older), VACUUM FULLs those tables so the figure is live
data (what autovacuum lets new rows reuse in a running system) and measures again. Prints one JSON line:
{"bench": "retention", "bytes_per_1000_rounds_before": ..., "bytes_per_1000_rounds_after": ..., "ratio": ...}.

    .venv/bin/python bench/retention.py                  # 1,000 rounds of 300 pending jobs
    .venv/bin/python bench/retention.py --rounds 200 --jobs 1000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path

# Tables a round writes to (the audit log: its summary row), and the outbox.
TABLES = ("market_round", "market_bidoutcome", "market_roundprice", "market_command", "accounts_auditevent")


def _populate(jobs: int) -> None:
    from accounts.models import Tenant, User
    from inventory.models import Gpu, GpuType, Node
    from market.models import Account, AccountKind, Bid, Job

    h100 = GpuType.objects.create(name="H100", memory_gb=80, reserve_price=1_000_000, max_price=50_000_000)
    user = User.objects.create(username="bench")
    tenants = Tenant.objects.bulk_create(Tenant(name=f"Team {i}", slug=f"team-{i}") for i in range(10))
    Account.objects.bulk_create(
        Account(tenant=t, kind=kind, balance=10**12 if kind == AccountKind.AVAILABLE else 0)
        for t in tenants
        for kind in (AccountKind.AVAILABLE, AccountKind.HELD)
    )
    node = Node.objects.create(name="n0", gpu_type=h100)
    Gpu.objects.bulk_create(Gpu(node=node, index=i, uuid=f"GPU-n0-{i}", model="H100") for i in range(8))
    made = Job.objects.bulk_create(
        Job(
            tenant=tenants[i % len(tenants)],
            submitter=user,
            name=f"job-{i}",
            command="python train.py --epochs 90",
            gpus=1 + i % 4,
            max_seconds=3600,
            grace_seconds=60,
            limits=[{"gpu_type": "H100", "limit": 2_000_000 + 1_000 * i}],
            wait_round=0,  # given: Job()'s default would query the rounds per job
        )
        for i in range(jobs)
    )
    Bid.objects.bulk_create(Bid(job=j, version=1, limits=j.limits, actor=user) for j in made)


def _bytes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        out = {}
        for table in TABLES:
            cursor.execute("SELECT pg_total_relation_size(%s)", [table])
            out[table] = int(cursor.fetchone()[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1_000)
    parser.add_argument("--jobs", type=int, default=300, help="pending backlog, frozen by every round")
    args = parser.parse_args()
    url = os.environ.get(
        "BENCH_RETENTION_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpumarket_bench_retention"
    )
    fresh_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("TLS", "0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from market.models import Round
    from market.selectors.policy import market_policy
    from market.services.retention import retention_prune
    from market.services.rounds import round_advance, slot_of

    call_command("migrate", verbosity=0)
    _populate(args.jobs)
    empty = _bytes()
    period = 300
    first = slot_of(timezone.now() - timedelta(days=2) - timedelta(seconds=period * args.rounds), period)
    started = time.perf_counter()
    for i in range(args.rounds):
        rnd = Round.objects.create(slot=first + timedelta(seconds=period * i), period_s=period)
        if round_advance(round_id=rnd.pk).state != "dispatched":
            raise SystemExit(f"round {rnd.pk} failed: {Round.objects.get(pk=rnd.pk).error}")
    rounds_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    before = _bytes()
    policy = market_policy()
    policy.retention_days = 1
    policy.save()
    started = time.perf_counter()
    stats = retention_prune()
    prune_s = time.perf_counter() - started
    connection.close()  # VACUUM FULL keeps rows that an open snapshot could still see: hold none
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f'VACUUM FULL "{table}"')
    after = _bytes()

    def per_1000(sizes: dict[str, int]) -> int:
        return round((sum(sizes.values()) - sum(empty.values())) * 1000 / int(args.rounds))

    b, a = per_1000(before), per_1000(after)
    print(
        json.dumps(
            {
                "bench": "retention",
                "rounds": args.rounds,
                "pending_jobs": args.jobs,
                "bytes_per_1000_rounds_before": b,
                "bytes_per_1000_rounds_after": a,
                "ratio": round(a / b, 4),
                "tables_before": before,
                "tables_after": after,
                "pruned": {"books": stats.books, "outcomes": stats.outcomes, "commands": stats.commands},
                "rounds_s": round(rounds_s, 1),
                "prune_s": round(prune_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
