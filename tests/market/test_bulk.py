"""market.bulk and the round commit built on it: PostgreSQL's path (COPY, UPDATE ... FROM arrays) against the
plain ORM path SQLite takes, each run on the same data in one database and compared row by row, and the ORM
path once more on SQLite itself (an in-memory twin holding the same rows: tests.sqlite_twin)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.forms.models import model_to_dict
from django.utils import timezone

from inventory.models import Node
from market import bulk
from market.gang import rendezvous_port
from market.models import (
    Account,
    BidOutcome,
    Command,
    CommandKind,
    FairShareRound,
    FairShareUsage,
    Hold,
    Job,
    JobState,
    JournalEntry,
    Lease,
    LeaseGpu,
    LeaseState,
    Posting,
    Round,
    RoundPrice,
    RoundState,
)
from market.models.rounds import SKIP_CHANGED
from market.selectors.policy import market_policy
from market.services import rounds
from market.services.guarantees import guarantee_set
from market.services.leases import lease_running
from tests.conftest import World
from tests.market.round_helpers import make_job
from tests.sqlite_twin import on_sqlite

pytestmark = pytest.mark.django_db

# What COPY's text format would misread if it were not escaped, and what JSON escapes itself.
AWKWARD = 'tab\there, new\nline, cr\r, back\\slash, "quoted", \\N, null \x01 é ✓'
SHORT = 'a\tb\nc\\d"\\N'  # within a 40-character column


def _both_paths(monkeypatch: pytest.MonkeyPatch, write: Any, read: Any) -> tuple[Any, Any]:
    """`write()` on PostgreSQL's path, then rolled back, then on the ORM path; `read()` after each. The ORM
    path also runs first on SQLite itself (make run's database), on an in-memory twin of the same rows, and
    must read as it does on PostgreSQL."""
    assert connection.vendor == "postgresql"
    with on_sqlite():
        write()
        on_sqlite_ = read()
    with transaction.atomic():
        write()
        fast = read()
        transaction.set_rollback(True)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    write()
    plain = read()
    assert plain == on_sqlite_
    return fast, plain


def _commands(node: Node, lease: Lease) -> list[dict[str, Any]]:
    now = timezone.now().replace(microsecond=123456)
    return [
        {
            "node_id": node.pk,
            "lease_id": lease.pk,
            "kind": kind,
            "payload": payload,
            "fence": 7,
            "state": "pending",
            "created_at": now,
            "expires_at": now + timedelta(seconds=i),
        }
        for i, (kind, payload) in enumerate(
            [
                (CommandKind.BIND, {"command": AWKWARD, "gpus": ["GPU-a", "GPU-b"], "price": 2_500_000}),
                (CommandKind.PREEMPT, {"reason": "", "nested": {"x": [1, None, 2.5, True]}}),
                (CommandKind.RELEASE, {}),
            ]
        )
    ]


def _lease(w: World) -> Lease:
    w.nodes(w.h100, 2, size=8)
    w.fund(w.alpha, 100)
    make_job(w.alpha, w.alice, limits={w.h100: 3})
    assert rounds.round_tick() is not None
    return Lease.objects.get()


def test_insert_by_copy_writes_what_bulk_create_writes_and_gives_ids_in_row_order(world, monkeypatch):
    lease = _lease(world)
    node = Node.objects.exclude(pk=lease.node_id).get()  # no command yet: (lease, node, kind) is unique
    rows = _commands(node, lease)
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    made: list[list[int]] = []

    def write() -> None:
        made.append(bulk.insert(Command, columns))

    def read() -> list[dict[str, Any]]:
        return [model_to_dict(Command.objects.get(pk=pk), exclude=["id", "created_at"]) for pk in made[-1]]

    fast, plain = _both_paths(monkeypatch, write, read)
    assert fast == plain
    assert [r["payload"] for r in fast] == [row["payload"] for row in rows]  # in the order given
    assert fast[0]["payload"]["command"] == AWKWARD
    assert made[0] == sorted(made[0]) and len(set(made[0])) == 3


def test_insert_without_ids_and_with_nulls(world, monkeypatch):
    lease = _lease(world)
    rnd = Round.objects.get()
    columns: dict[str, list[Any]] = {
        "round_id": [rnd.pk] * 2,
        "job_id": [lease.job_id, lease.job_id + 1000],
        "bid_version": [1, 3],
        "won": [False, False],
        "tier": ["", ""],
        "gpu_type_id": [world.h100.pk, world.a100.pk],
        "price": [None, 7],
        "reason": [SHORT, "x"],
        "figure": [None, 12],
    }

    def write() -> None:
        BidOutcome.objects.filter(round=rnd).delete()
        assert bulk.insert(BidOutcome, columns, ids=False) == []

    def read() -> list[dict[str, Any]]:
        return list(BidOutcome.objects.filter(round=rnd).order_by("job_id").values(*columns))

    fast, plain = _both_paths(monkeypatch, write, read)
    assert fast == plain and [r["reason"] for r in fast] == [SHORT, "x"]


def test_update_sets_each_rows_values_on_both_paths(world, monkeypatch):
    jobs = [make_job(world.alpha, world.alice, name=f"j{i}") for i in range(4)]
    now = timezone.now()
    pks = [jobs[2].pk, jobs[0].pk, jobs[3].pk]
    columns: dict[str, list[object]] = {
        "state": [JobState.ALLOCATED, JobState.CANCELLED, JobState.ALLOCATED],
        "waited_before": [0, 5, 0],
        "updated_at": [now, now - timedelta(hours=1), now],
    }
    counts: list[int] = []

    def write() -> None:
        counts.append(bulk.update(Job, pks, columns))

    def read() -> list[tuple[Any, ...]]:
        return list(Job.objects.order_by("pk").values_list("pk", "state", "waited_before", "updated_at"))

    fast, plain = _both_paths(monkeypatch, write, read)
    assert fast == plain and counts == [3, 3, 3]  # SQLite, PostgreSQL, the ORM path
    assert [row[1] for row in fast] == ["cancelled", "pending", "allocated", "allocated"]
    assert bulk.update(Job, [], {"state": []}) == 0


@pytest.mark.parametrize("update", [["owed_gpu_hours", "updated_at"], []])
def test_upsert_updates_or_keeps_existing_rows_on_both_paths(world, monkeypatch, update):
    w = world
    at = timezone.now()
    rnd = Round.objects.create(slot=at, period_s=300)
    for tenant, owed in ((w.alpha, 1.5), (w.beta, -2.0)):
        FairShareUsage.objects.create(
            tenant=tenant, gpu_type=w.h100, owed_gpu_hours=owed, updated_at=at, round=rnd
        )
    later = at + timedelta(minutes=5)
    columns: dict[str, list[Any]] = {
        "tenant_id": [w.alpha.pk, w.gamma.pk],
        "gpu_type_id": [w.h100.pk, w.a100.pk],
        "owed_gpu_hours": [0.1 + 0.2, 3.0],
        "updated_at": [later, later],
        "round_id": [rnd.pk, rnd.pk],
    }

    def read() -> list[tuple[Any, ...]]:
        return sorted(
            FairShareUsage.objects.values_list("tenant_id", "gpu_type_id", "owed_gpu_hours", "updated_at")
        )

    unique = ["tenant_id", "gpu_type_id"]
    fast, plain = _both_paths(
        monkeypatch, lambda: bulk.upsert(FairShareUsage, columns, unique=unique, update=update), read
    )
    assert fast == plain and len(fast) == 3
    alpha = next(row for row in fast if row[0] == w.alpha.pk)
    assert alpha[2:] == ((0.1 + 0.2, later) if update else (1.5, at))


def test_any_of_selects_the_same_rows_on_both_paths(world, monkeypatch):
    """One array parameter on PostgreSQL, the plain list elsewhere: the same rows for ids (none, repeats, an
    id of no row) and for texts an array literal must quote (commas, quotes, braces, backslashes, NULL, "")."""
    names = ["a,b", 'x"y', "back\\slash", "{brace}", "NULL", "", " sp ", AWKWARD[:40], "plain"]
    jobs = [make_job(world.alpha, world.alice, name=name) for name in names]
    ids = [job.pk for job in jobs]

    def read() -> list[list[int]]:
        asks = [
            Job.objects.filter(pk__in=bulk.any_of(ids[:3])),
            Job.objects.filter(pk__in=bulk.any_of([])),
            Job.objects.filter(pk__in=bulk.any_of([ids[0], ids[0], 10**9])),
            Job.objects.filter(name__in=bulk.any_of(names[:7], "text")),
            Job.objects.filter(name__in=bulk.any_of(["NULL", "none of them", "a"], "text")),
            Job.objects.filter(name__in=bulk.any_of(names[7:], "text")),
        ]
        return [sorted(ask.values_list("pk", flat=True)) for ask in asks]

    fast, plain = _both_paths(monkeypatch, lambda: None, read)
    assert fast == plain == [ids[:3], [], [ids[0]], ids[:7], [ids[4]], ids[7:]]


# ---- the round commit, both paths ---------------------------------------------------------------------


def _written(rnd: Round) -> dict[str, Any]:
    """Every row the round's commit wrote or changed, ids replaced by natural keys (jobs, hold keys): the
    two runs draw different ids from the sequences."""
    lease_job = dict(Lease.objects.values_list("pk", "job_id"))
    mine = Lease.objects.filter(round=rnd) | Lease.objects.filter(preempted_round=rnd)
    entry_key = dict(JournalEntry.objects.values_list("pk", "key"))
    hold_key = dict(Hold.objects.values_list("pk", "key"))
    # A tenant's held account is created by its first hold: in each run anew.
    account = {
        pk: (tenant, kind) for pk, tenant, kind in Account.objects.values_list("pk", "tenant_id", "kind")
    }

    def rows(queryset: Any, *, exclude: tuple[str, ...] = (), **keys: dict[int, Any]) -> list[dict[str, Any]]:
        out = []
        for obj in queryset:
            row = model_to_dict(obj, exclude=["id", *exclude])
            for name, mapping in keys.items():
                row[name] = mapping.get(row[name], row[name])
            out.append(row)
        return sorted(out, key=repr)

    commands = rows(Command.objects.filter(fence=rnd.pk), lease=lease_job)
    for command in commands:
        payload = command["payload"]
        if "gang" in payload:  # the rendezvous port follows the lease id, which differs between the runs
            assert payload["gang"]["rdzv_port"] == rendezvous_port(payload["lease"], settings.GANG_PORT_RANGE)
            payload = {**payload, "gang": {**payload["gang"], "rdzv_port": "the lease's"}}
        command["payload"] = {**payload, "lease": lease_job.get(payload.get("lease"))}
    return {
        "round": model_to_dict(
            Round.objects.get(pk=rnd.pk), exclude=["id", "commit_ms", "freeze_ms", "clear_ms", "book"]
        ),
        "leases": rows(mine),
        "lease_gpus": rows(LeaseGpu.objects.filter(lease__in=mine), lease=lease_job),
        "commands": commands,
        "outcomes": rows(BidOutcome.objects.filter(round=rnd)),
        "holds": rows(Hold.objects.filter(key__startswith=f"round:{rnd.pk}:")),
        "entries": rows(JournalEntry.objects.filter(key__startswith=f"round:{rnd.pk}:"), hold=hold_key),
        "postings": rows(
            Posting.objects.filter(entry__key__startswith=f"round:{rnd.pk}:"),
            entry=entry_key,
            account=account,
        ),
        "accounts": sorted(Account.objects.values_list("tenant_id", "kind", "balance"), key=repr),
        "jobs": sorted(Job.objects.values_list("pk", "state", "waited_before", "wait_round", "updated_at")),
        "prices": rows(RoundPrice.objects.filter(round=rnd)),
        "fair_share": rows(FairShareUsage.objects.all()),
        "fair_share_round": rows(FairShareRound.objects.filter(round=rnd)),
    }


def _round_to_commit(w: World, monkeypatch: pytest.MonkeyPatch) -> tuple[Round, Job, Job]:
    """A cleared round with a preemption, winners of two types, a job changed after the freeze, losers and a
    command text COPY must escape; returns it with the amended job and the awkward one. The clock stops."""
    w.nodes(w.h100, 2, size=8)
    w.nodes(w.a100, 2, size=8)
    for tenant in (w.alpha, w.beta, w.gamma):
        w.fund(tenant, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0
    policy.save()
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    first = [make_job(w.beta, w.bob, gpus=8, limits={w.h100: 6}, name=f"b{i}") for i in range(2)]
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 2
    for job in first:
        lease_running(lease_id=job.leases.get().pk)
    make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 3}, name="alpha-guaranteed")
    odd = make_job(w.gamma, w.cara, gpus=4, limits={w.a100: 5}, name=AWKWARD)
    Job.objects.filter(pk=odd.pk).update(command=AWKWARD)
    changed = make_job(w.gamma, w.carl, limits={w.a100: 9}, name="amended")
    for i in range(3):
        make_job(w.beta, w.bea, limits={w.h100: 1, w.a100: 1}, name=f"loser{i}")
    slot = rounds.slot_of(r1.slot + timedelta(seconds=r1.period_s), r1.period_s)
    r2 = Round.objects.create(slot=slot, period_s=r1.period_s)
    assert rounds.round_advance(round_id=r2.pk, stop_after=RoundState.CLEARED).state == RoundState.CLEARED
    Job.objects.filter(pk=changed.pk).update(bid_version=2)  # amended after the freeze: skipped at commit
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)  # both runs write at the same instant
    return r2, changed, odd


def test_the_round_commit_writes_the_same_rows_on_both_paths(world, monkeypatch):
    """PostgreSQL's path and the ORM path, on PostgreSQL and on SQLite, write the same rows
    (_round_to_commit)."""
    r2, changed, odd = _round_to_commit(world, monkeypatch)
    fast, plain = _both_paths(
        monkeypatch,
        lambda: rounds.round_advance(round_id=r2.pk),
        lambda: _written(Round.objects.get(pk=r2.pk)),
    )
    assert fast == plain
    _check_commit(fast, changed, odd)


def _check_commit(fast: dict[str, Any], changed: Job, odd: Job) -> None:
    assert fast["round"]["state"] == RoundState.DISPATCHED
    assert fast["round"]["preemptions"] == 1 and fast["round"]["winners"] == 2
    assert {(o["job"], o["reason"]) for o in fast["outcomes"] if o["job"] == changed.pk} == {
        (changed.pk, SKIP_CHANGED)
    }
    assert sum(not o["won"] for o in fast["outcomes"]) >= 4
    binds = [c for c in fast["commands"] if c["lease"] == odd.pk]
    assert len(binds) == 1 and {c["payload"]["command"] for c in binds} == {AWKWARD}
    assert any(lease["state"] == LeaseState.STOPPING for lease in fast["leases"])
