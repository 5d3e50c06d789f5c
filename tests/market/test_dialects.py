"""The market's SQL-dialect branches, each run on PostgreSQL and on an in-memory SQLite twin holding the same
rows (tests.sqlite_twin), with the answers compared: the book's pending-job columns (market.selectors.book
`_pending`), a bid's place in the queue (market.selectors.explain `queue_ahead`), the job list's GPU-type
filter (market.selectors.jobs `_accepts`: JSON containment vs positional compare) and the many-holds ledger
path (market.services.ledger_bulk, whose balance move is one UPDATE ... FROM arrays on PostgreSQL). SQLite is
the embedded default of `make run`: its path must give the answers PostgreSQL's gives."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from inventory.models import GpuType
from market.models import Account, Hold, Job, JobState, JournalEntry, Posting
from market.selectors.book import _pending
from market.selectors.explain import queue_ahead, queue_places
from market.selectors.jobs import job_list
from market.services.ledger_bulk import HoldRequest, ledger_hold_many
from tests.conftest import World
from tests.market.round_helpers import make_job
from tests.sqlite_twin import on_sqlite

pytestmark = pytest.mark.django_db


def _market(w: World) -> dict[str, Job]:
    """Pending jobs of three tenants over three GPU types: several entries per bid in different orders, ties
    on price and on submit time, a type named by no node, a single-type bid, a gang, and jobs that are not
    pending (left out by every query)."""
    v100 = GpuType.objects.create(name="V100", memory_gb=16, reserve_price=500_000, max_price=5_000_000)
    jobs = {
        "a-h100": make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 3}, age_s=50),
        "a-both": make_job(w.alpha, w.amy, limits={w.a100: 2, w.h100: 3}, age_s=50),  # ties a-h100
        "b-three": make_job(w.beta, w.bob, gpus=2, limits={w.h100: 2.5, w.a100: 2, v100: 1}, age_s=40),
        "b-v100": make_job(w.beta, w.bea, limits={v100: 1}, age_s=30),
        "c-a100": make_job(w.gamma, w.carl, gpus=4, limits={w.a100: 4}, age_s=20),
        "c-cheap": make_job(w.gamma, w.cara, limits={w.h100: 0.000001, w.a100: 2}, age_s=40),
        "done": make_job(w.alpha, w.alice, limits={w.h100: 9}),
        "cancelled": make_job(w.beta, w.bob, limits={w.a100: 9}),
    }
    same = timezone.now().replace(microsecond=0) - timedelta(seconds=50)
    Job.objects.filter(pk__in=[jobs["a-h100"].pk, jobs["a-both"].pk]).update(submitted_at=same)
    Job.objects.filter(pk=jobs["done"].pk).update(state=JobState.COMPLETED)
    Job.objects.filter(pk=jobs["cancelled"].pk).update(state=JobState.CANCELLED)
    Job.objects.filter(pk=jobs["b-three"].pk).update(waited_before=3, wait_round=7, bid_version=2)
    return {name: Job.objects.get(pk=job.pk) for name, job in jobs.items()}


def _columns(tenants: list[int], types: list[str]) -> dict[str, list[Any]]:
    return {name: values.tolist() for name, values in _pending(tenants, types).items()}


def test_the_books_pending_columns_are_the_same_on_both(world):
    w = world
    jobs = _market(w)
    tenants = [w.alpha.pk, w.beta.pk, w.gamma.pk]
    asks = [
        (tenants, ["H100", "A100", "V100"]),
        (tenants, ["V100", "H100"]),  # another order: the limit columns follow it
        (tenants, ["B200"]),  # a type no bid names: NO_PRICE everywhere
        (tenants, []),  # no types: a job row with no limit columns
        ([w.gamma.pk, w.beta.pk], ["A100"]),
        ([], ["H100"]),  # no tenants: empty columns
    ]
    on_postgres = [_columns(*ask) for ask in asks]
    with on_sqlite():
        on_sqlite_ = [_columns(*ask) for ask in asks]
    assert on_postgres == on_sqlite_
    full = on_postgres[0]
    pending = sorted(j.pk for n, j in jobs.items() if n not in ("done", "cancelled"))
    assert full["job"] == pending and on_postgres[-1]["job"] == []
    three = full["job"].index(jobs["b-three"].pk)
    assert full["limit"][three] == [2_500_000, 2_000_000, 1_000_000]
    assert (full["waited_before"][three], full["wait_round"][three], full["version"][three]) == (3, 7, 2)
    assert on_postgres[3]["limit"] == [[] for _ in pending]


def _places(jobs: dict[str, Job], at: Any) -> list[object]:
    places: list[object] = [queue_places(job) for job in jobs.values()]
    # Bids not submitted yet (job_id 0): every tie submitted earlier is ahead of them.
    for name in ("H100", "A100", "V100", "B200"):
        for limit in (0, 1, 2_000_000, 3_000_000, 10**12):
            places.append(queue_ahead(gpu_type=name, limit=limit, submitted_at=at))
    return places


def test_queue_places_are_the_same_on_both(world):
    jobs = _market(world)
    at = jobs["a-both"].submitted_at  # ties the two alpha jobs' submit time exactly
    on_postgres = _places(jobs, at)
    with on_sqlite():
        assert _places(jobs, at) == on_postgres
    h100 = {p.gpu_type: p for p in queue_places(jobs["a-both"])}["H100"]
    # a-h100 ties it on price and time and comes first by id; nothing bids more.
    assert (h100.position, h100.gpus_ahead) == (2, 8)
    assert queue_places(jobs["done"]) == []


def _filtered(w: World) -> dict[str | None, list[int]]:
    out: dict[str | None, list[int]] = {}
    for tenant in (w.alpha, w.beta, w.gamma):
        for name in ("H100", "A100", "V100", "B200", "h100", None):
            found = job_list(tenant=tenant, gpu_type=name)
            out[f"{tenant.slug}:{name}"] = sorted(found.values_list("pk", flat=True))
        out[f"{tenant.slug}:pending-A100"] = sorted(
            job_list(tenant=tenant, states=[JobState.PENDING], gpu_type="A100").values_list("pk", flat=True)
        )
    return out


def test_the_job_lists_gpu_type_filter_is_the_same_on_both(world):
    w = world
    jobs = _market(w)
    make_job(w.beta, w.bob, limits={}, name="empty")  # an empty bid: no type accepts it
    on_postgres = _filtered(w)
    with on_sqlite():
        assert _filtered(w) == on_postgres
    # The last entry of a three-entry bid is found; a type is matched exactly, not by case.
    assert on_postgres["beta:V100"] == sorted([jobs["b-three"].pk, jobs["b-v100"].pk])
    assert on_postgres["beta:A100"] == sorted([jobs["b-three"].pk, jobs["cancelled"].pk])
    assert on_postgres["beta:pending-A100"] == [jobs["b-three"].pk]
    assert on_postgres["alpha:h100"] == [] and on_postgres["gamma:B200"] == []
    assert len(on_postgres["beta:None"]) == 4


def _ledger() -> dict[str, Any]:
    """What the holds left, by natural keys (ids may differ between the two databases' sequences)."""
    tenant_kind = dict(
        (pk, (tenant, kind)) for pk, tenant, kind in Account.objects.values_list("pk", "tenant_id", "kind")
    )
    return {
        # Platform accounts have no tenant (None): sorted by repr.
        "accounts": sorted(Account.objects.values_list("tenant_id", "kind", "balance"), key=repr),
        "holds": sorted(Hold.objects.values_list("key", "tenant_id", "amount", "state", "charged")),
        "entries": sorted(
            JournalEntry.objects.values_list("key", "kind", "tenant_id", "amount", "memo"), key=repr
        ),
        "postings": sorted(
            [
                (entry, tenant_kind[account], amount)
                for entry, account, amount in Posting.objects.values_list(
                    "entry__key", "account_id", "amount"
                )
            ],
            key=repr,
        ),
    }


def test_many_holds_move_the_same_money_on_both(world):
    """Placed, refused (no longer fits, while a later smaller one still does), replayed, conflicting and zero
    holds, over a tenant with no held account yet and one with no accounts at all."""
    w = world
    w.fund(w.alpha, 10)
    w.fund(w.beta, 3)
    with transaction.atomic():
        ledger_hold_many([HoldRequest(tenant_id=w.beta.pk, amount=1_000_000, key="round:1:held-before")])
    requests = [
        HoldRequest(tenant_id=w.alpha.pk, amount=6_000_000, key="round:2:a1", memo="job 1"),
        HoldRequest(tenant_id=w.alpha.pk, amount=5_000_000, key="round:2:a2"),  # refused: 4 left
        HoldRequest(tenant_id=w.alpha.pk, amount=4_000_000, key="round:2:a3"),  # fits exactly
        HoldRequest(tenant_id=w.alpha.pk, amount=0, key="round:2:a0"),  # no postings
        HoldRequest(tenant_id=w.beta.pk, amount=1_000_000, key="round:1:held-before"),  # replay
        HoldRequest(tenant_id=w.beta.pk, amount=2_000_000, key="round:1:held-before"),  # conflict
        HoldRequest(tenant_id=w.beta.pk, amount=2_000_000, key="round:2:b1"),
        HoldRequest(tenant_id=w.gamma.pk, amount=1, key="round:2:g1"),  # gamma has no money
    ]

    def hold() -> tuple[Any, dict[str, Any]]:
        with transaction.atomic():
            placed = ledger_hold_many(requests)
        return placed, _ledger()

    with on_sqlite():
        on_sqlite_ = hold()
    on_postgres = hold()
    assert on_postgres == on_sqlite_
    placed = on_postgres[0]
    assert placed.placed == ["round:2:a1", "round:2:a3", "round:2:a0", "round:2:b1"]
    assert placed.refused == ["round:2:a2", "round:2:g1"]
    assert (placed.replayed, placed.conflicted) == (["round:1:held-before"], ["round:1:held-before"])
    assert (w.alpha.pk, "available", 0) in on_postgres[1]["accounts"]
