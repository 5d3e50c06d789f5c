"""The measured-usage move's migrations (issue 26) on a PostgreSQL database that held data before them.

UsageReport and LeaseUsage left nodeagent for market; their tables (nodeagent_usagereport,
nodeagent_leaseusage) stay where they were, and UsageMark stays nodeagent's. A scratch database is built at
the last migrations before the move, filled through the historical models (a node with GPUs, a gang lease
on two nodes with its GPUs, usage reports, marks and lease counters, permissions on the moved models granted
to a user and a group, an admin log entry), migrated forward, checked, and migrated back. The scratch
database and its helpers are tests/migration_moves.py, shared with the inventory move's test.
"""

# usage_rewrite: imports only (the historical models below are the pre-move ones: "nodeagent.LeaseUsage",
# "nodeagent.UsageReport"; the checks import the current ones)
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.apps.registry import Apps
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.migration_moves import (
    all_rows,
    content_types,
    migrate_to,
    scratch_postgres,
    sql_statements,
    table_columns,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Every app at its last migration before the move.
PRE_MOVE: list[tuple[str, str | None]] = [
    ("accounts", "0004_guarantee_to_market"),
    ("inventory", "0002_content_types"),
    ("market", "0021_spend_alerts"),
    ("nodeagent", "0003_inventory_repoint"),
    ("admin", "0003_logentry_add_action_flag_choices"),
]
MOVE: list[tuple[str, str | None]] = [
    ("market", "0022_usage_from_nodeagent"),
    ("nodeagent", "0004_usage_to_market"),
    ("market", "0023_usage_content_types"),
]
RELABEL = "0023_usage_content_types"
# model: (app before, app after); usagemark stays, and its content type with it.
MOVED = {"usagereport": ("nodeagent", "market"), "leaseusage": ("nodeagent", "market")}
STAYS = {"usagemark": "nodeagent", "bootstraptoken": "nodeagent", "lease": "market"}
TABLES = ["nodeagent_usagereport", "nodeagent_leaseusage", "nodeagent_usagemark"]


def _constraints(db: Any) -> dict[str, Any]:
    """Every constraint and index on the usage tables, by name, with its columns and kind."""
    with db.cursor() as cursor:
        return {
            table: {
                name: (tuple(c["columns"]), c["primary_key"], c["unique"], c["foreign_key"], c["index"])
                for name, c in db.introspection.get_constraints(cursor, table).items()
            }
            for table in TABLES
        }


def _fill(apps: Apps) -> dict[str, Any]:
    """A gang lease on two nodes with what their agents reported, through the pre-move models."""

    def model(label: str) -> Any:
        return apps.get_model(label)

    now = timezone.now()
    owner = model("accounts.User").objects.create(username="olga", is_staff=True)
    viewer = model("accounts.User").objects.create(username="viktor")
    tenant = model("accounts.Tenant").objects.create(name="Alpha", slug="alpha", weight=2)
    model("accounts.Membership").objects.create(user=owner, tenant=tenant, role="owner")
    h100 = model("inventory.GpuType").objects.create(
        name="H100", memory_gb=80, reserve_price=2_000_000, max_price=20_000_000, posted_price=3_000_000
    )
    nodes, gpus = [], []
    for n in ("h100-a", "h100-b"):
        node = model("inventory.Node").objects.create(name=n, gpu_type=h100, boot_epoch=3)
        nodes.append(node)
        gpus += [
            model("inventory.Gpu").objects.create(node=node, index=i, uuid=f"GPU-{n}-{i}", memory_mb=81920)
            for i in range(2)
        ]
    job = model("market.Job").objects.create(
        tenant=tenant,
        submitter=owner,
        name="train",
        command="python train.py",
        gpus=4,
        max_seconds=3600,
        grace_seconds=30,
        limits={"H100": 5_000_000},
        state="running",
    )
    round_ = model("market.Round").objects.create(slot=now, period_s=30, state="dispatched")
    lease = model("market.Lease").objects.create(
        job=job,
        tenant=tenant,
        round=round_,
        node=nodes[0],
        gpu_type=h100,
        tier="M",
        preemptible=True,
        price=3_000_000,
        gpus=4,
        max_seconds=3600,
        grace_seconds=30,
        hold_key="lease-1",
        state="running",
        started_at=now - timedelta(minutes=5),
    )
    for gpu in gpus:
        model("market.LeaseGpu").objects.create(lease=lease, gpu=gpu)
    for seq, node in enumerate(nodes, start=7):
        model("nodeagent.UsageMark").objects.create(node=node, boot_epoch=3, seq=seq)
        model("nodeagent.UsageReport").objects.create(
            node=node,
            boot_epoch=3,
            seq=seq,
            sent_at=now,
            received_at=now,
            samples=[{"uuid": f"GPU-{node.name}-0", "util_pct": 90.0, "energy_j": 1e4}],
        )
        model("nodeagent.LeaseUsage").objects.create(
            lease=lease, node=node, gpu_seconds=600.0, energy_j=9e4, samples=5, log_tail=f"{node.name} ok"
        )
    return _grants(apps, owner=owner, viewer=viewer)


def _grants(apps: Apps, *, owner: Any, viewer: Any) -> dict[str, Any]:
    """Content types and permissions as post_migrate makes them, granted to a user and a group, and the
    admin log entry an edit of a lease's usage writes."""
    content_type = apps.get_model("contenttypes.ContentType")
    permission = apps.get_model("auth.Permission")
    ids = {}
    for model, app in {**{m: a for m, (a, _) in MOVED.items()}, **STAYS}.items():
        ct = content_type.objects.create(app_label=app, model=model)
        ids[model] = ct.pk
        for action in ("add", "change", "delete", "view"):
            permission.objects.create(
                content_type=ct, codename=f"{action}_{model}", name=f"Can {action} {model}"
            )
    owner.user_permissions.add(permission.objects.get(codename="change_leaseusage"))
    group = apps.get_model("auth.Group").objects.create(name="operators")
    group.permissions.add(*permission.objects.filter(codename__in=["view_usagereport", "view_usagemark"]))
    viewer.groups.add(group)
    usage = apps.get_model("nodeagent.LeaseUsage").objects.order_by("pk").first()
    apps.get_model("admin.LogEntry").objects.create(
        user=owner,
        content_type_id=ids["leaseusage"],
        object_id=str(usage.pk),
        object_repr="lease usage h100-a",
        action_flag=2,
        change_message="[]",
    )
    return ids


def _check_after_move(ids: dict[str, Any]) -> None:
    """The market's models read the same rows, every key resolves, permissions and the log follow."""
    from django.contrib.admin.models import LogEntry

    from accounts.models import User
    from inventory.models import Node
    from market.models import Lease, LeaseUsage, UsageReport
    from market.selectors.usage import lease_measured, usage_combined
    from nodeagent.models import UsageMark

    lease = Lease.objects.get()
    nodes = list(Node.objects.order_by("name"))
    assert [u.node for u in lease.usage.order_by("node__name")] == nodes  # the reverse key, still "usage"
    assert sorted(lg.gpu.uuid for lg in lease.lease_gpus.all()) == [
        "GPU-h100-a-0",
        "GPU-h100-a-1",
        "GPU-h100-b-0",
        "GPU-h100-b-1",
    ]
    assert lease_measured(lease_id=lease.pk).gpu_seconds == 1200.0
    summary = usage_combined(list(LeaseUsage.objects.filter(lease=lease).order_by("node__name")))
    assert (summary.samples, summary.log_tail) == (10, "h100-a ok\nh100-b ok")
    assert [r.node for r in UsageReport.objects.order_by("seq")] == nodes
    assert UsageReport.objects.get(node=nodes[0]).samples[0]["uuid"] == "GPU-h100-a-0"
    assert [(m.node, m.seq) for m in UsageMark.objects.order_by("seq")] == [(nodes[0], 7), (nodes[1], 8)]

    classes = {"usagereport": UsageReport, "leaseusage": LeaseUsage, "usagemark": UsageMark}
    for model, (_, app) in MOVED.items():
        ct = ContentType.objects.get(pk=ids[model])
        assert (ct.app_label, ct.model_class()) == (app, classes[model])
    for model, app in STAYS.items():
        assert ContentType.objects.get(pk=ids[model]).app_label == app
    owner, viewer = User.objects.get(username="olga"), User.objects.get(username="viktor")
    assert owner.has_perm("market.change_leaseusage") and not owner.has_perm("nodeagent.change_leaseusage")
    assert viewer.has_perm("market.view_usagereport") and viewer.has_perm("nodeagent.view_usagemark")
    entry = LogEntry.objects.get()
    assert entry.get_edited_object() == LeaseUsage.objects.get(node=nodes[0])


def test_the_move_keeps_every_row_key_and_content_type_and_goes_back():
    with scratch_postgres() as db:
        ids = _fill(migrate_to(db, PRE_MOVE))
        before, types_before, constraints_before = all_rows(db), content_types(db), _constraints(db)
        columns = table_columns(db)
        assert all(len(c) >= 3 for c in constraints_before.values())  # key, unique, foreign key(s) at least

        migrate_to(db, MigrationExecutor(db).loader.graph.leaf_nodes())
        after = all_rows(db, columns=columns)
        assert {t: after[t] for t in before} == before  # not one row of any table changed, added or lost
        assert not any(after[t] for t in set(after) - set(before))  # apps migrated along (ops, ...) are empty
        assert _constraints(db) == constraints_before  # same names, columns and keys: nothing was rebuilt
        moved = {ids[m]: (app, m) for m, (_, app) in MOVED.items()}
        assert content_types(db) == {**types_before, **moved}  # same ids: permissions and log entries follow
        _check_after_move(ids)

        migrate_to(db, PRE_MOVE)
        after = all_rows(db, columns=columns)
        assert {t: after[t] for t in before} == before
        assert content_types(db) == types_before
        assert _constraints(db) == constraints_before


def test_a_content_type_made_under_market_before_the_rename_gives_way_to_the_moving_one():
    """post_migrate after a partial migrate (market 0022 and nodeagent 0004 applied, 0023 not) makes the
    market's content types; the rename must not collide with them, and the old ones, holding the grants, win."""
    with scratch_postgres() as db:
        ids = _fill(migrate_to(db, PRE_MOVE))
        apps = migrate_to(db, [m for m in MOVE if m[1] != RELABEL])
        fresh = apps.get_model("contenttypes.ContentType").objects.create(
            app_label="market", model="leaseusage"
        )
        migrate_to(db, MigrationExecutor(db).loader.graph.leaf_nodes())
        types = content_types(db)
        assert fresh.pk not in types and types[ids["leaseusage"]] == ("market", "leaseusage")
        _check_after_move(ids)


@pytest.mark.parametrize(("app", "name"), MOVE)
def test_the_move_runs_no_sql_on_the_movedall_rows(app, name):
    """State only: sqlmigrate shows nothing but the transaction (the content-type rename is Python)."""
    for backwards in (False, True):
        statements = sql_statements(app, name, backwards=backwards)
        assert statements in ([], ["BEGIN;", "COMMIT;"]), (app, name, backwards, statements)
    assert connection.vendor == "postgresql"
