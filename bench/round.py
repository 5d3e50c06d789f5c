"""One auction round on PostgreSQL: 20,000 pending jobs from 200 tenants over 1,000 nodes of 8 GPUs.

Builds a fresh database (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/gpumarket_bench:
dropped and re-created), fills it with bulk inserts, then times one round through every step and prints
one JSON line: {"bench": "round", "jobs": ..., "gpus": ..., "round_s": ..., "clear_s": ..., "commit_s": ...}
plus the freeze time, the time of the transactions' COMMITs (db_commit_s: foreign key checks of the rows the
commit step wrote), what is left (other_s: locks, round row saves, the dispatch step), the CPU seconds the round
used in this process and in its PostgreSQL backend (cpu_s, split as py_cpu_s and db_cpu_s; what an idle
machine's wall time would be, less I/O),
the 1-minute load average (load) and the winners.
Each figure is the median round's of --repeat (3) rounds, each on a fresh copy of the populated database
(`rounds_s`: all of them); `baseline_s` times a fixed piece of Python and PostgreSQL work in the same run, `ratio`
is round_s over it; `db_mb` is the database's size after the round (pg_database_size).
The data is built once per run into a template database (`<name>_tpl_<jobs>_<tenants>_<nodes>_<seed>`, analyzed
as autovacuum would have), and each round runs on a copy of it (`CREATE DATABASE ... TEMPLATE`, then any
migration the template lacks). `--reuse` keeps a template an earlier run built (the 200,000-job one takes
minutes to fill); `build_s` says how long this run spent building it.
Targets: round_s under 1 second at the default size (issue 20); under 5 seconds at
`--nodes 12500 --tenants 10000 --jobs 200000` (issue 29).

`--second`: a first round runs untimed on the copy, then the timed round is a second one over the jobs it
left pending (its slot one period later); `--after N`: N untimed rounds first. The line adds `after` and
`before_outcomes` (the outcome rows each untimed round wrote); every line has `bids` (the timed round's) and `outcomes` (the outcome rows it wrote: a bid that lost as
it had the round before writes none, docs/rounds.md §At fleet scale, writing less).

`--statements`: the backend's CPU seconds per statement of the round (read from /proc around each one, so
10 ms ticks: the large ones are what it is for), grouped by what the statement does (`COPY market_lease`,
`UPDATE market_job`, `COMMIT`, ...), printed to stderr for the median round, largest first.

`--shadow`: one proposed policy version runs in shadow (docs/rounds.md §Shadow rounds: every tenant's weight
changed, the minimum runtime halved), so the round clears its book a second time after the live commit. The
line then adds `live_s` (the round up to and including its dispatch), `shadow_s` (the shadow after it: the book
under the proposal, its clearing, the comparison and the ShadowRound row), `shadow_clear_s` and
`shadow_ratio` = round_s / live_s, the live round plus its shadow against the live round alone, timed in the
same round (target: at most 1.3).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _db import fresh_database  # noqa: E402 - bench/ is the script's folder, first on sys.path

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpumarket_bench"


def _populate(jobs: int, tenants: int, nodes: int, seed: int) -> None:
    import numpy as np
    from django.utils import timezone

    from accounts.models import Tenant, User
    from inventory.models import Gpu, GpuType, Node
    from market.models import Account, AccountKind, Bid, Guarantee, Job

    rng = np.random.default_rng(seed)
    h100 = GpuType.objects.create(name="H100", memory_gb=80, reserve_price=1_000_000, max_price=50_000_000)
    user = User.objects.create(username="bench")
    ts = Tenant.objects.bulk_create(
        Tenant(name=f"Team {i}", slug=f"team-{i}", weight=int(rng.integers(1, 5))) for i in range(tenants)
    )
    # Money as the ledger would hold it after top-ups: balances only matter to the round, not their history.
    Account.objects.bulk_create(
        Account(tenant=t, kind=kind, balance=10**12 if kind == AccountKind.AVAILABLE else 0)
        for t in ts
        for kind in (AccountKind.AVAILABLE, AccountKind.HELD)
    )
    Guarantee.objects.bulk_create(Guarantee(tenant=t, gpu_type=h100, gpus=16) for t in ts[: tenants // 5])
    ns = Node.objects.bulk_create(
        Node(name=f"n{i:04d}", gpu_type=h100, topology_domain=f"rack-{i // 32}") for i in range(nodes)
    )
    Gpu.objects.bulk_create(
        (Gpu(node=n, index=s, uuid=f"GPU-{n.name}-{s}", model="H100") for n in ns for s in range(8)),
        batch_size=5000,
    )
    gang = np.where(rng.random(jobs) < 0.8, 1, rng.integers(2, 9, jobs))
    limit = (np.exp(rng.normal(np.log(2.5), 0.4, jobs)) * 1_000_000).astype(np.int64)
    owner = rng.integers(0, tenants, jobs)
    now = timezone.now()
    rows = [
        Job(
            tenant=ts[int(owner[i])],
            submitter=user,
            name=f"job-{i}",
            command="python train.py",
            gpus=int(gang[i]),
            max_seconds=3600 * int(1 + i % 8),
            grace_seconds=60,
            limits=[{"gpu_type": "H100", "limit": int(limit[i])}],
            submitted_at=now,
            wait_round=0,  # no round yet (given, so that 20,000 constructors do not each query the default)
        )
        for i in range(jobs)
    ]
    made = Job.objects.bulk_create(rows, batch_size=5000)
    Bid.objects.bulk_create(
        (Bid(job=j, version=1, limits=j.limits, actor=user) for j in made), batch_size=5000
    )


def _backend_cpu(connection: Any) -> Callable[[], float]:
    """CPU seconds used so far by this connection's PostgreSQL backend, read from /proc (0 when the server is
    not on this machine). With the bench's own CPU time this is the round's work whatever else the machine
    runs: on a shared machine wall time is mostly waiting for a core."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        stat = Path(f"/proc/{cursor.fetchone()[0]}/stat")
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile the round, to stderr (slower)")
    parser.add_argument(
        "--reuse", action="store_true", help="use the template database an earlier run of the same size and "
        "seed built, if there is one, instead of building it again"
    )  # fmt: skip
    parser.add_argument(
        "--shadow", action="store_true", help="run one proposed policy version in shadow and time its share"
    )
    parser.add_argument(
        "--statements", action="store_true", help="the backend's CPU per statement of the round, to stderr"
    )
    parser.add_argument(
        "--second", action="store_true", help="time a second round over the same pending jobs (the first "
        "runs untimed before it): what a round costs once most bids lost the round before"
    )  # fmt: skip
    parser.add_argument(
        "--after", type=int, default=0, help="untimed rounds before the timed one (--second: 1); at fleet "
        "scale the second round's losers still change (outbid in the first, busy once every GPU is taken)"
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds, each on a freshly built database (default 3): one "
        "round on a shared 2-core machine varies by a fifth; the figures are the median round's"
    )  # fmt: skip
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat: must be at least 1")
    if args.after < 0:
        parser.error("--after: must be at least 0")
    args.after = max(args.after, 1 if args.second else 0)
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("TLS", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    template = f"{url.rsplit('/', 1)[1]}_tpl_{args.jobs}_{args.tenants}_{args.nodes}_{args.seed}"
    started = time.perf_counter()
    if not (args.reuse and _exists(url, template)):
        _build_template(url, template, args)
    build_s = time.perf_counter() - started
    runs = [_one_round(args, url, template) for _ in range(args.repeat)]
    runs.sort(key=lambda run: run["round_s"])
    median = runs[len(runs) // 2]
    statements = median.pop("_statements", None)
    for run in runs:
        run.pop("_statements", None)
    if statements:
        total = sum(cpu for cpu, _n in statements.values())
        print(f"backend CPU per statement, median round ({total:.2f} s in all):", file=sys.stderr)
        for label, (cpu, n) in sorted(statements.items(), key=lambda kv: -kv[1][0])[:25]:
            print(f"  {cpu:6.2f} s  {n:4d}x  {label}", file=sys.stderr)
    print(
        json.dumps(
            {
                **median,
                "rounds_s": sorted(run["round_s"] for run in runs),
                "repeat": args.repeat,
                "build_s": round(build_s, 1),
            }
        )
    )


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def _exists(url: str, name: str) -> bool:
    with _admin(url) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def _build_template(url: str, template: str, args: argparse.Namespace) -> None:
    """Fill the bench database, analyze it (as autovacuum would have by the time a round runs), and keep it
    as the template every round copies."""
    from django.core.management import call_command
    from django.db import connection, connections

    connections.close_all()
    fresh_database(url)
    call_command("migrate", verbosity=0)
    _populate(args.jobs, args.tenants, args.nodes, args.seed)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    connections.close_all()
    name = url.rsplit("/", 1)[1]
    with _admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        conn.execute(f'ALTER DATABASE "{name}" RENAME TO "{template}"')


def _copy_template(url: str, template: str) -> None:
    name = url.rsplit("/", 1)[1]
    with _admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        # FILE_COPY: one checkpoint and a copy of the files, much faster than WAL-logging every page.
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')


def _baseline() -> float:
    """A fixed piece of both kinds of work a round does, Python and PostgreSQL, timed in the same run:
    `ratio` (round_s / baseline_s) moves with the code more than with how busy the machine is."""
    from django.db import connection

    started = time.perf_counter()
    json.dumps(list(range(300_000)))
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(i) FROM generate_series(1, 1000000) i")
    return time.perf_counter() - started


def _one_round(args: argparse.Namespace, url: str, template: str) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connections
    from django.utils import timezone

    from market.models import BidOutcome, Round
    from market.services import rounds

    connections.close_all()  # the last round's connection: its database is dropped next
    _copy_template(url, template)
    call_command("migrate", verbosity=0)  # what this checkout adds to a template an older one built
    if args.shadow:
        _shadow_version()
    slot = rounds.slot_of(timezone.now(), 300)
    before_outcomes = []
    for _ in range(args.after):  # untimed rounds first: their winners allocated, their losers still pending
        first = rounds.round_advance(round_id=Round.objects.create(slot=slot, period_s=300).pk)
        if first.state != "dispatched":
            raise SystemExit(f"an untimed round ended {first.state}: {first.error}")
        before_outcomes.append(BidOutcome.objects.filter(round=first).count())
        slot = slot + timedelta(seconds=300)
    rnd = Round.objects.create(slot=slot, period_s=300)
    # The shadow runs after the live round's dispatch, inside round_advance: timed apart by wrapping its door.
    shadow_times: list[float] = []
    from market.services.shadow import shadow_rounds_run as real_shadow  # what rounds calls, wrapped there

    def timed_shadow(**kwargs: Any) -> int:
        started = time.perf_counter()
        try:
            return real_shadow(**kwargs)
        finally:
            shadow_times.append(time.perf_counter() - started)

    vars(rounds)["shadow_rounds_run"] = timed_shadow  # the benchmark times the shadow by wrapping its door
    # The steps time their own work; the COMMIT of each step's transaction (deferred foreign key checks of
    # everything the commit step inserted) comes after, so it is timed here.
    from django.db import connection

    db_commits: list[float] = []
    real_commit = connection._commit  # type: ignore[attr-defined]  # private in Django; the stubs leave it out

    def timed_commit() -> None:
        started = time.perf_counter()
        try:
            real_commit()
        finally:
            db_commits.append(time.perf_counter() - started)

    backend_cpu = _backend_cpu(connection)
    statements: dict[str, list[float]] = {}

    def charge(label: str, before: float) -> None:
        cpu_n = statements.setdefault(label, [0.0, 0])
        cpu_n[0] += backend_cpu() - before
        cpu_n[1] += 1

    if args.statements:
        timed_commit = _statement_timed(timed_commit, "COMMIT", backend_cpu, charge)
        _wrap_bulk(backend_cpu, charge)
        # Appended, not entered as execute_wrapper's context: an unreferenced one is popped when collected.
        connection.execute_wrappers.append(_statement_wrapper(backend_cpu, charge))
    connection._commit = timed_commit  # type: ignore[attr-defined]  # private in Django (the stubs leave it out): the benchmark times the commit by wrapping it
    cpu_before = (time.process_time(), backend_cpu())
    profile = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    done = rounds.round_advance(round_id=rnd.pk)
    round_s = time.perf_counter() - started
    py_cpu_s, db_cpu_s = time.process_time() - cpu_before[0], backend_cpu() - cpu_before[1]
    cpu_s = py_cpu_s + db_cpu_s
    connection._commit = real_commit  # type: ignore[attr-defined]  # private in Django (the stubs leave it out): the benchmark times the commit by wrapping it
    vars(rounds)["shadow_rounds_run"] = real_shadow
    if args.statements:
        connection.execute_wrappers.clear()
        _unwrap_bulk()
    if profile is not None:
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats(
            os.environ.get("PROFILE_SORT", "cumulative")
        ).print_stats(int(os.environ.get("PROFILE_N", "30")))
    baseline_s = _baseline()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        db_mb = cursor.fetchone()[0] / 2**20
    if done.state != "dispatched":
        raise SystemExit(f"round ended {done.state}: {done.error}")
    shadow: dict[str, Any] = {}
    if args.shadow:
        from market.models import ShadowRound

        row = ShadowRound.objects.filter(round=done).first()
        if row is None:
            raise SystemExit("the shadow round was not stored (see the log)")
        shadow_s = sum(shadow_times)
        live_s = round_s - shadow_s
        shadow = {
            "live_s": round(live_s, 3),
            "shadow_s": round(shadow_s, 3),
            "shadow_clear_s": round(row.clear_ms / 1000, 3),
            "shadow_ratio": round(round_s / live_s, 3),
            "shadow_gained": row.gained,
            "shadow_lost": row.lost,
        }
    second = {"after": args.after, "before_outcomes": before_outcomes} if args.after else {}
    return {
        "bench": "round",
        **second,
        "bids": done.bids,
        "outcomes": BidOutcome.objects.filter(round=done).count(),
        "jobs": args.jobs,
        "gpus": args.nodes * 8,
        "round_s": round(round_s, 3),
        "clear_s": round((done.clear_ms or 0) / 1000, 3),
        "commit_s": round((done.commit_ms or 0) / 1000, 3),
        "freeze_s": round((done.freeze_ms or 0) / 1000, 3),
        "db_commit_s": round(sum(db_commits), 3),
        "other_s": round(
            round_s
            - sum(shadow_times)
            - sum(db_commits)
            - ((done.freeze_ms or 0) + (done.clear_ms or 0) + (done.commit_ms or 0)) / 1000,
            3,
        ),
        "cpu_s": round(cpu_s, 3),
        "py_cpu_s": round(py_cpu_s, 3),
        "db_cpu_s": round(db_cpu_s, 3),
        "baseline_s": round(baseline_s, 3),
        "ratio": round(round_s / baseline_s, 2),
        "load": round(os.getloadavg()[0], 1),
        "winners": done.winners,
        "gpus_allocated": done.gpus_allocated,
        "db_mb": round(db_mb),
        **shadow,
        **({"_statements": {k: (v[0], int(v[1])) for k, v in statements.items()}} if args.statements else {}),
    }


def _label(sql: str) -> str:
    """What a statement does, for grouping: its verb and first table ("UPDATE market_job")."""
    import re

    words = sql.split()
    verb = words[0].upper() if words else "?"
    table = re.search(r'(?:FROM|INTO|UPDATE|COPY)\s+"?(\w+)"?', sql, re.IGNORECASE)
    return f"{verb} {table.group(1) if table else ''}".strip()


def _statement_wrapper(cpu: Callable[[], float], charge: Callable[[str, float], None]) -> Any:
    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        before = cpu()
        try:
            return execute(sql, params, many, context)
        finally:
            charge(_label(sql), before)

    return wrapper


def _statement_timed(
    call: Callable[[], None], label: str, cpu: Callable[[], float], charge: Callable[[str, float], None]
) -> Callable[[], None]:
    def timed() -> None:
        before = cpu()
        try:
            call()
        finally:
            charge(label, before)

    return timed


_BULK: dict[str, Any] = {}


def _wrap_bulk(cpu: Callable[[], float], charge: Callable[[str, float], None]) -> None:
    """market.bulk's statements go through psycopg's own cursor, which Django's wrappers do not see."""
    from market import bulk

    for name, verb in (("insert", "COPY"), ("update", "UPDATE"), ("upsert", "UPSERT")):
        real = _BULK.setdefault(name, getattr(bulk, name))

        def timed(model: Any, *a: Any, _real: Any = real, _verb: str = verb, **kw: Any) -> Any:
            before = cpu()
            try:
                return _real(model, *a, **kw)
            finally:
                charge(f"{_verb} {model._meta.db_table} (bulk)", before)

        setattr(bulk, name, timed)


def _unwrap_bulk() -> None:
    from market import bulk

    for name, real in _BULK.items():
        setattr(bulk, name, real)


def _shadow_version() -> None:
    """One proposed version in shadow: today's policy with every tenant's weight moved (1-4 becomes 5-2) and
    the minimum runtime halved, started by an admin as the console would."""
    from accounts.models import User
    from market.selectors.policy_snapshot import policy_snapshot
    from market.services.policy_proposals import policy_version_propose
    from market.services.shadow import shadow_start

    admin = User.objects.create(username="bench-admin", is_staff=True)
    proposal = policy_snapshot()
    for entry in proposal["tenants"].values():
        entry["weight"] = 6 - entry["weight"]
    proposal["market"]["min_runtime_s"] //= 2
    version = policy_version_propose(
        actor=admin, snapshot=proposal, reason="bench: weights reversed, minimum runtime halved"
    )
    shadow_start(actor=admin, version=version)


if __name__ == "__main__":
    main()
