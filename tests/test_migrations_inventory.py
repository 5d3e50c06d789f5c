"""The inventory carve-out's migrations (issue 26) on a PostgreSQL database that held data before them.

GpuType left market, Node and Gpu left nodeagent, for the new inventory app, and Guarantee left accounts for
market; their tables stay where they were. A scratch database is built at the last pre-move migrations, filled with demo-like rows through the
historical models (tenants, GPU types, nodes, GPUs, guarantees, jobs, rounds, leases with their GPUs, commands,
usage, an admin log entry, permissions on the moved models), migrated forward, checked, and migrated back.
"""

# inventory_rewrite: skip (the historical models below are the pre-move ones: market.GpuType, nodeagent.Node,
# accounts.Guarantee)
# usage_rewrite: imports only (the historical "nodeagent.UsageReport" and "nodeagent.LeaseUsage" below are
# the pre-move ones too; _check_after_move imports the current models)
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

# Every app at its last migration before the move; inventory not at all.
PRE_MOVE = [
    ("accounts", "0002_tenant_guardrail"),
    ("market", "0014_merge_fair_share_lease_checkpoint"),
    ("nodeagent", "0002_agent_credentials_usage"),
    ("admin", "0003_logentry_add_action_flag_choices"),
    ("inventory", None),
]
MOVE = [
    ("inventory", "0001_initial"),
    ("accounts", "0003_guarantee_inventory_gputype"),
    ("market", "0017_inventory_repoint"),
    ("nodeagent", "0003_inventory_repoint"),
    ("market", "0018_inventory_delete_gputype"),
    ("inventory", "0002_content_types"),
    ("market", "0019_guarantee_from_accounts"),
    ("accounts", "0004_guarantee_to_market"),
    ("market", "0020_guarantee_content_type"),
]
RELABEL = {"0002_content_types", "0020_guarantee_content_type"}
# model: (app before, app after)
MOVED = {
    "gputype": ("market", "inventory"),
    "node": ("nodeagent", "inventory"),
    "gpu": ("nodeagent", "inventory"),
    "guarantee": ("accounts", "market"),
}


def _fill(apps: Apps) -> dict[str, Any]:
    """Demo-like rows through the pre-move models, as `manage.py demo_data` and a few rounds would leave."""

    def model(label: str) -> Any:
        return apps.get_model(label)

    now = timezone.now()
    owner = model("accounts.User").objects.create(username="olga", is_staff=True, is_superuser=False)
    viewer = model("accounts.User").objects.create(username="viktor")
    tenant = model("accounts.Tenant").objects.create(name="Alpha", slug="alpha", weight=2)
    model("accounts.Membership").objects.create(user=owner, tenant=tenant, role="owner")
    h100 = model("market.GpuType").objects.create(
        name="H100", memory_gb=80, reserve_price=2_000_000, max_price=20_000_000, posted_price=3_000_000
    )
    a100 = model("market.GpuType").objects.create(
        name="A100", memory_gb=80, reserve_price=1_200_000, max_price=12_000_000
    )
    guarantee = model("accounts.Guarantee").objects.create(tenant=tenant, gpu_type=h100, gpus=2)
    node = model("nodeagent.Node").objects.create(
        name="h100-a", gpu_type=h100, topology_domain="d0", credential_digest="ab" * 32, boot_epoch=3
    )
    model("nodeagent.Node").objects.create(name="a100-a", gpu_type=a100, state="draining", drained_at=now)
    gpus = [
        model("nodeagent.Gpu").objects.create(node=node, index=i, uuid=f"GPU-h100-a-{i}", memory_mb=81920)
        for i in range(4)
    ]
    model("nodeagent.Gpu").objects.create(node=node, index=0, uuid="GPU-h100-a-old", absent=True)
    model("nodeagent.BootstrapToken").objects.create(
        prefix="gpb_x", digest="cd" * 32, gpu_type=h100, created_by=owner, expires_at=now, node=node
    )
    job = model("market.Job").objects.create(
        tenant=tenant,
        submitter=owner,
        name="train",
        command="python train.py",
        gpus=2,
        max_seconds=3600,
        grace_seconds=30,
        limits={"H100": 5_000_000},
        state="running",
        wait_round=1,
    )
    model("market.Bid").objects.create(job=job, version=1, limits={"H100": 5_000_000}, actor=owner)
    round_ = model("market.Round").objects.create(slot=now, period_s=30, state="dispatched")
    model("market.RoundPrice").objects.create(
        round=round_, gpu_type=h100, reserve=2_000_000, posted=3_000_000, next_posted=3_100_000
    )
    model("market.BidOutcome").objects.create(
        round=round_, job=job, bid_version=1, won=True, tier="M", gpu_type=h100, price=3_000_000
    )
    model("market.FairShareRound").objects.create(
        round=round_, slot=now, tenant=tenant, gpu_type=h100, held=2, waiting=0, target=2.5, capacity=4
    )
    model("market.FairShareUsage").objects.create(
        tenant=tenant, gpu_type=h100, round=round_, owed_gpu_hours=1.5, updated_at=now
    )
    lease = model("market.Lease").objects.create(
        job=job,
        tenant=tenant,
        round=round_,
        node=node,
        gpu_type=h100,
        tier="M",
        preemptible=True,
        price=3_000_000,
        gpus=2,
        max_seconds=3600,
        grace_seconds=30,
        hold_key="lease-1",
        state="running",
        started_at=now - timedelta(minutes=5),
    )
    for gpu in gpus[:2]:
        model("market.LeaseGpu").objects.create(lease=lease, gpu=gpu)
    model("market.Command").objects.create(
        node=node, lease=lease, kind="bind", payload={"lease": lease.pk}, fence=1, expires_at=now
    )
    model("nodeagent.UsageMark").objects.create(node=node, boot_epoch=3, seq=7)
    model("nodeagent.UsageReport").objects.create(
        node=node, boot_epoch=3, seq=7, sent_at=now, received_at=now, samples=[{"uuid": "GPU-h100-a-0"}]
    )
    model("nodeagent.LeaseUsage").objects.create(lease=lease, node=node, gpu_seconds=600.0, energy_j=9e4)
    return _grants(apps, owner=owner, viewer=viewer, gpu_type=h100, node=node, guarantee=guarantee)


def _grants(
    apps: Apps, *, owner: Any, viewer: Any, gpu_type: Any, node: Any, guarantee: Any
) -> dict[str, Any]:
    """Content types and permissions as post_migrate makes them, granted to a user and a group, and the
    admin log entry an edit of a GPU type writes."""
    content_type = apps.get_model("contenttypes.ContentType")
    permission = apps.get_model("auth.Permission")
    ids = {}
    for model, (app, _) in MOVED.items():
        ct = content_type.objects.create(app_label=app, model=model)
        ids[model] = ct.pk
        for action in ("add", "change", "delete", "view"):
            permission.objects.create(
                content_type=ct, codename=f"{action}_{model}", name=f"Can {action} {model}"
            )
    ids["job"] = content_type.objects.create(app_label="market", model="job").pk
    owner.user_permissions.add(permission.objects.get(codename="change_gputype"))
    group = apps.get_model("auth.Group").objects.create(name="operators")
    group.permissions.add(
        *permission.objects.filter(codename__in=["view_node", "view_gpu", "change_guarantee"]),
    )
    viewer.groups.add(group)
    apps.get_model("admin.LogEntry").objects.create(
        user=owner,
        content_type_id=ids["gputype"],
        object_id=str(gpu_type.pk),
        object_repr="H100",
        action_flag=2,
        change_message="[]",
    )
    apps.get_model("admin.LogEntry").objects.create(
        user=owner,
        content_type_id=ids["node"],
        object_id=str(node.pk),
        object_repr="h100-a",
        action_flag=2,
    )
    apps.get_model("admin.LogEntry").objects.create(
        user=owner,
        content_type_id=ids["guarantee"],
        object_id=str(guarantee.pk),
        object_repr="alpha H100",
        action_flag=1,
    )
    return ids


def _check_after_move(ids: dict[str, Any]) -> None:
    """The current models (inventory's) read the same rows, every key resolves, permissions and log follow."""
    from django.contrib.admin.models import LogEntry

    from accounts.models import Tenant, User
    from inventory.models import Gpu, GpuType, Node
    from market.models import (
        BidOutcome,
        Command,
        FairShareRound,
        FairShareUsage,
        Guarantee,
        Lease,
        LeaseUsage,
        RoundPrice,
        UsageReport,
    )
    from nodeagent.models import BootstrapToken, UsageMark

    h100 = GpuType.objects.get(name="H100")
    assert h100.current_posted == 3_000_000
    guarantee = Guarantee.objects.get()
    assert (guarantee.tenant, guarantee.gpu_type, guarantee.gpus) == (
        Tenant.objects.get(slug="alpha"),
        h100,
        2,
    )
    assert list(h100.guarantees.all()) == [guarantee] == list(guarantee.tenant.guarantees.all())
    node = Node.objects.get(name="h100-a")
    assert node.gpu_type == h100 and set(h100.nodes.values_list("name", flat=True)) == {"h100-a"}
    assert node.gpus.count() == 5 and Gpu.objects.filter(node=node, absent=False).count() == 4
    lease = Lease.objects.get()
    assert (lease.node, lease.gpu_type) == (node, h100)
    assert sorted(lg.gpu.uuid for lg in lease.lease_gpus.all()) == ["GPU-h100-a-0", "GPU-h100-a-1"]
    assert Command.objects.get().node == node
    assert RoundPrice.objects.get().gpu_type == h100 and BidOutcome.objects.get().gpu_type == h100
    assert FairShareRound.objects.get().gpu_type == h100 and FairShareUsage.objects.get().gpu_type == h100
    token = BootstrapToken.objects.get()
    assert (token.gpu_type, token.node) == (h100, node)
    assert UsageMark.objects.get().node == node and UsageReport.objects.get().node == node
    assert LeaseUsage.objects.get().node == node

    classes = {"gputype": GpuType, "node": Node, "gpu": Gpu, "guarantee": Guarantee}
    for model, (_, app) in MOVED.items():
        ct = ContentType.objects.get(pk=ids[model])
        assert (ct.app_label, ct.model_class()) == (app, classes[model])
    assert ContentType.objects.get(pk=ids["job"]).app_label == "market"
    owner, viewer = User.objects.get(username="olga"), User.objects.get(username="viktor")
    assert owner.has_perm("inventory.change_gputype") and not owner.has_perm("market.change_gputype")
    assert viewer.has_perm("inventory.view_node") and viewer.has_perm("inventory.view_gpu")
    assert viewer.has_perm("market.change_guarantee") and not viewer.has_perm("accounts.change_guarantee")
    entry = LogEntry.objects.get(object_repr="H100")
    assert entry.get_edited_object() == h100
    assert entry.get_admin_url() == f"/admin/inventory/gputype/{h100.pk}/change/"
    assert LogEntry.objects.get(object_repr="h100-a").get_edited_object() == node
    entry = LogEntry.objects.get(object_repr="alpha H100")
    assert entry.get_edited_object() == guarantee
    assert entry.get_admin_url() == f"/admin/market/guarantee/{guarantee.pk}/change/"


def test_the_move_keeps_every_row_key_and_content_type_and_goes_back():
    with scratch_postgres() as db:
        ids = _fill(migrate_to(db, PRE_MOVE))
        before, types_before, columns = all_rows(db), content_types(db), table_columns(db)

        migrate_to(db, MigrationExecutor(db).loader.graph.leaf_nodes())
        after = all_rows(db, columns=columns)
        assert {t: after[t] for t in before} == before  # not one row of any table changed, added or lost
        assert not any(after[t] for t in set(after) - set(before))  # apps migrated along (ops, ...) are empty
        moved = {ids[m]: (app, m) for m, (_, app) in MOVED.items()}
        assert content_types(db) == {**types_before, **moved}  # same ids: permissions and log entries follow
        _check_after_move(ids)

        migrate_to(db, PRE_MOVE)
        after = all_rows(db, columns=columns)
        assert {t: after[t] for t in before} == before
        assert content_types(db) == types_before


def test_a_content_type_made_under_inventory_before_the_rename_gives_way_to_the_moving_one():
    """post_migrate after a partial migrate (inventory 0001 applied, 0002 not) makes inventory's content types;
    the rename must not collide with them, and the old ones, holding the grants, win."""
    with scratch_postgres() as db:
        ids = _fill(migrate_to(db, PRE_MOVE))
        apps = migrate_to(db, [m for m in MOVE if m[1] not in RELABEL])
        fresh = apps.get_model("contenttypes.ContentType").objects.create(app_label="inventory", model="node")
        migrate_to(db, MigrationExecutor(db).loader.graph.leaf_nodes())
        types = content_types(db)
        assert fresh.pk not in types and types[ids["node"]] == ("inventory", "node")
        _check_after_move(ids)


@pytest.mark.parametrize(("app", "name"), MOVE)
def test_the_move_runs_no_sql_on_the_movedall_rows(app, name):
    """State only: sqlmigrate shows nothing but the transaction (the content-type rename is Python)."""
    for backwards in (False, True):
        statements = sql_statements(app, name, backwards=backwards)
        assert statements in ([], ["BEGIN;", "COMMIT;"]), (app, name, backwards, statements)
    assert connection.vendor == "postgresql"
