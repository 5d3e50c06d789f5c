"""Migration 0030 (issue 36 §3: a round's hold shared by its tenant's winners) on a database that held per-job
holds before it: a settled hold is closed whole (closed = amount, its one part closed), an open one holds its
whole amount still, every entry on a hold names the hold's one lease, the ledger check passes, and the open
hold of before settles whole through today's services (a lease of before has no share)."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps.registry import Apps
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.migration_moves import migrate_to, scratch_postgres

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE: list[tuple[str, str | None]] = [("market", "0029_usage_samples_partitioned")]


def _fill(apps: Apps) -> dict[str, int]:
    """A tenant with 1,000 credits topped up and two leases of before, one settled (30 of its 100 charged)
    and one running (50 held), with the postings the ledger wrote then."""

    def model(label: str) -> Any:
        return apps.get_model(label)

    now = timezone.now()
    user = model("accounts.User").objects.create(username="olga")
    tenant = model("accounts.Tenant").objects.create(name="Alpha", slug="alpha", weight=1)
    h100 = model("inventory.GpuType").objects.create(
        name="H100", memory_gb=80, reserve_price=1, max_price=10, posted_price=1
    )
    node = model("inventory.Node").objects.create(name="n1", gpu_type=h100)
    rnd = model("market.Round").objects.create(slot=now, period_s=30, state="dispatched")
    account = {
        kind: model("market.Account").objects.create(
            tenant=tenant if kind in ("available", "held") else None, kind=kind
        )
        for kind in ("available", "held", "revenue", "topup")
    }
    balance = dict.fromkeys(account, 0)

    def entry(key: str, kind: str, amount: int, legs: dict[str, int], hold: Any = None) -> Any:
        made = model("market.JournalEntry").objects.create(
            key=key, kind=kind, tenant=tenant, amount=amount, hold=hold
        )
        for kind_, delta in legs.items():
            model("market.Posting").objects.create(entry=made, account=account[kind_], amount=delta)
            balance[kind_] += delta
        return made

    entry("client:1:t", "topup", 1000, {"topup": -1000, "available": 1000})
    ids: dict[str, int] = {}
    for name, amount in (("settled", 100), ("open", 50)):
        job = model("market.Job").objects.create(
            tenant=tenant, submitter=user, name=name, command="x", gpus=1, max_seconds=3600, grace_seconds=30,
            limits=[{"gpu_type": "H100", "limit": 5}], submitted_at=now, wait_round=0,
        )  # fmt: skip
        key = f"round:{rnd.pk}:job:{job.pk}"
        lease = model("market.Lease").objects.create(
            job=job, tenant=tenant, round=rnd, node=node, gpu_type=h100, tier="S", preemptible=True, price=1,
            gpus=1, max_seconds=3600, grace_seconds=30, hold_key=key, state="running", started_at=now,
        )  # fmt: skip
        hold = model("market.Hold").objects.create(key=key, tenant=tenant, amount=amount)
        entry(key, "hold", amount, {"available": -amount, "held": amount}, hold)
        ids[name] = lease.pk
    settled = model("market.Hold").objects.get(amount=100)
    entry(
        f"lease:{ids['settled']}:settle",
        "settle",
        30,
        {"held": -100, "revenue": 30, "available": 70},
        settled,
    )
    model("market.Hold").objects.filter(pk=settled.pk).update(state="settled", charged=30, settled_at=now)
    for kind, acc in account.items():
        model("market.Account").objects.filter(pk=acc.pk).update(balance=balance[kind])
    return ids


def test_holds_of_before_are_whole_parts_and_their_entries_name_their_lease():
    from market.models import Hold, HoldState, JournalEntry, Lease
    from market.selectors.ledger import ledger_problems, tenant_balance
    from market.services.leases import lease_stopped

    with scratch_postgres() as db:
        ids = _fill(migrate_to(db, BEFORE))
        migrate_to(db, MigrationExecutor(db).loader.graph.leaf_nodes())
        settled = Hold.objects.get(amount=100)
        assert (settled.state, settled.closed, settled.parts, settled.parts_closed) == (
            HoldState.SETTLED,
            100,
            1,
            1,
        )
        opened = Hold.objects.get(amount=50)
        assert (opened.state, opened.closed, opened.parts, opened.parts_closed) == (HoldState.OPEN, 0, 1, 0)
        assert sorted(
            JournalEntry.objects.filter(hold__isnull=False).values_list("key", "lease_id")
        ) == sorted(
            [
                (settled.key, ids["settled"]),
                (f"lease:{ids['settled']}:settle", ids["settled"]),
                (opened.key, ids["open"]),
            ]
        )
        assert JournalEntry.objects.get(kind="topup").lease_id is None
        assert ledger_problems() == []
        # The running lease of before has no share: its settlement closes its whole hold.
        assert Lease.objects.get(pk=ids["open"]).hold_share is None
        lease_stopped(lease_id=ids["open"], bill=False)
        opened.refresh_from_db()
        assert (opened.state, opened.closed, opened.charged) == (HoldState.SETTLED, 50, 0)
        assert ledger_problems() == [] and tenant_balance(tenant=settled.tenant).held == 0
