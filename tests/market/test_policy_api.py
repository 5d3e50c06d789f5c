"""Policy API: market knobs, tenant weight/guardrail/guarantees, the audit log; access, validation, audit."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.models import AuditEvent, Tenant
from config.errors import PolicyError
from inventory.models import GpuType
from market.models import Guarantee, Lease, MarketPolicy, Round
from market.selectors.policy import market_policy
from market.services.guarantees import guarantee_set
from market.services.policy import policy_update, tenant_policy_update
from tests.conftest import World
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db

POLICY = "/api/v1/policy"


def tenant_url(slug: str = "alpha") -> str:
    return f"/api/v1/tenants/{slug}/policy"


def patch(client: Any, url: str, body: Any) -> Any:
    return client.patch(url, body, format="json")


def audit_rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action))


def admin_in(world: World, tenant: Tenant) -> Any:
    """The platform admin with a token bound to tenant (a token sees only its own tenant)."""
    return world.client(world.admin, tenant=tenant)


# Market policy: reading


def test_anyone_signed_in_reads_the_rules_anonymous_gets_401(world: World) -> None:
    for user in (world.amy, world.bob, world.admin):
        resp = world.client(user).get(POLICY)
        assert resp.status_code == 200
        body = resp.json()
        assert {k: body[k] for k in ("price_step_bp", "min_runtime_s", "default_grace_s")} == {
            "price_step_bp": 500,
            "min_runtime_s": 600,
            "default_grace_s": 120,
        }
        assert {"round_seconds", "starve_rounds", "max_reservations", "updated_at"} <= set(body)
    assert world.client().get(POLICY).status_code == 401


# Market policy: changing


def test_admin_changes_knobs_one_audit_row_with_old_and_new(world: World) -> None:
    old_round = market_policy().round_seconds
    resp = patch(world.client(world.admin), POLICY, {"price_step_bp": 250, "round_seconds": 60})
    assert resp.status_code == 200, resp.json()
    assert (resp.json()["price_step_bp"], resp.json()["round_seconds"]) == (250, 60)
    policy = MarketPolicy.objects.get()
    assert (policy.price_step_bp, policy.round_seconds, policy.min_runtime_s) == (250, 60, 600)
    [row] = audit_rows("policy.update")
    assert row.actor == world.admin and row.tenant is None
    assert row.detail == {"price_step_bp": [500, 250], "round_seconds": [old_round, 60]}


def test_unchanged_values_are_left_out_and_a_no_op_writes_no_audit_row(world: World) -> None:
    admin = world.client(world.admin)
    assert patch(admin, POLICY, {"min_runtime_s": 600}).status_code == 200
    assert patch(admin, POLICY, {}).status_code == 200
    assert audit_rows("policy.update") == []
    assert patch(admin, POLICY, {"min_runtime_s": 600, "starve_rounds": 7}).status_code == 200
    [row] = audit_rows("policy.update")
    assert row.detail == {"starve_rounds": [5, 7]}


def test_fair_reclaim_is_an_admin_switch_that_reaches_the_round_book(world: World) -> None:
    """ARCHITECTURE.md §Clearing step 6: fair reclaim is on by default; an admin switches it off (audited), the
    next round's book carries it to the allocator; anything but 0 or 1 is a 400 naming the field."""
    from allocator.book_json import policy_from_json
    from market.selectors.book import book_snapshot

    admin = world.client(world.admin)
    assert world.client(world.amy).get(POLICY).json()["fair_reclaim"] == 1
    bad = patch(admin, POLICY, {"fair_reclaim": 2})
    assert bad.status_code == 400 and "fair_reclaim" in bad.json()["fields"]
    assert patch(admin, POLICY, {"fair_reclaim": 0, "max_reserved_pct": 20}).json()["fair_reclaim"] == 0
    [row] = audit_rows("policy.update")
    assert row.detail == {"fair_reclaim": [1, 0], "max_reserved_pct": [10, 20]}
    book = book_snapshot(round_id=0, now=timezone.now(), policy=market_policy()).book
    assert book.policy.fair_reclaim is False and book.policy.max_reserved_pct == 20
    assert policy_from_json(book.to_json()["policy"]) == book.policy


@pytest.mark.parametrize("user", ["alice", "amy", "bob"])
def test_only_admins_change_the_rules(world: World, user: str) -> None:
    resp = patch(world.client(getattr(world, user)), POLICY, {"price_step_bp": 1})
    assert resp.status_code == 403
    assert resp.json()["error"] == "permission_denied"
    assert market_policy().price_step_bp == 500
    assert audit_rows("policy.update") == []


def test_anonymous_cannot_change_the_rules(world: World) -> None:
    assert patch(world.client(), POLICY, {"price_step_bp": 1}).status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"round_seconds": 9}, "round_seconds"),
        ({"round_seconds": 86_401}, "round_seconds"),
        ({"price_step_bp": 0}, "price_step_bp"),
        ({"price_step_bp": 5_001}, "price_step_bp"),
        ({"min_runtime_s": -1}, "min_runtime_s"),
        ({"min_runtime_s": 7 * 86_400 + 1}, "min_runtime_s"),
        ({"default_grace_s": 3_601}, "default_grace_s"),
        ({"starve_rounds": 0}, "starve_rounds"),
        ({"starve_rounds": 1_001}, "starve_rounds"),
        ({"max_reservations": 1_001}, "max_reservations"),
        ({"max_reservations": "many"}, "max_reservations"),
        ({"max_reservations": 1.5}, "max_reservations"),
        ({"max_reservations": None}, "max_reservations"),
        ({"price_step": 100}, "price_step"),  # unknown: a typo must not look like success
        ({"min_runtime_s": 60, "round_secs": 60}, "round_secs"),
    ],
)
def test_bad_knob_is_400_naming_it_nothing_changed(world: World, body: dict[str, Any], field: str) -> None:
    before = MarketPolicy.objects.filter(pk=market_policy().pk).values().get()
    resp = patch(world.client(world.admin), POLICY, body)
    assert resp.status_code == 400, resp.json()
    assert resp.json()["error"] == "invalid"
    assert field in resp.json()["fields"]
    assert MarketPolicy.objects.values().get() == before
    assert audit_rows("policy.update") == []


def test_knob_bounds_are_accepted(world: World) -> None:
    admin = world.client(world.admin)
    low = {"round_seconds": 10, "price_step_bp": 1, "min_runtime_s": 0, "default_grace_s": 0}
    high = {
        "round_seconds": 86_400,
        "price_step_bp": 5_000,
        "min_runtime_s": 7 * 86_400,
        "starve_rounds": 1000,
    }
    for body in (low, high, {"starve_rounds": 1, "max_reservations": 0}, {"max_reservations": 1000}):
        assert patch(admin, POLICY, body).status_code == 200, body
    assert len(audit_rows("policy.update")) == 4


def test_body_must_be_an_object(world: World) -> None:
    resp = patch(world.client(world.admin), POLICY, [1, 2])
    assert resp.status_code == 400
    assert audit_rows("policy.update") == []


def test_service_refuses_non_admins_unknown_fields_and_bad_values(world: World) -> None:
    with pytest.raises(PermissionDenied):
        policy_update(actor=world.alice, price_step_bp=100)
    with pytest.raises(PermissionDenied):
        policy_update(actor=None, price_step_bp=100)
    with pytest.raises(PolicyError) as err:
        policy_update(actor=world.admin, nonsense=1)
    assert err.value.field == "nonsense"
    with pytest.raises(PolicyError) as err:
        policy_update(actor=world.admin, starve_rounds=True)  # a bool is not a number of rounds
    assert err.value.field == "starve_rounds"
    with pytest.raises(PolicyError) as err:
        policy_update(actor=world.admin, default_grace_s=60, price_step_bp=0)
    assert err.value.field == "price_step_bp"
    assert market_policy().default_grace_s == 120  # validated before anything is written
    assert not AuditEvent.objects.filter(action="policy.update").exists()


# Tenant policy: reading


def test_members_and_admins_read_the_tenant_policy(world: World) -> None:
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=4)
    Tenant.objects.filter(pk=world.alpha.pk).update(guardrail=12_500_000)
    for client in (world.client(world.alice), world.client(world.amy), admin_in(world, world.alpha)):
        resp = client.get(tenant_url())
        assert resp.status_code == 200
        assert resp.json() == {
            "tenant": "alpha",
            "weight": 1,
            "guardrail": 12_500_000,
            "guardrail_credits": "12.5",
            "guarantees": {"H100": 4},
            "held": [],
        }


def test_no_guardrail_reads_as_null(world: World) -> None:
    body = world.client(world.bob).get(tenant_url("beta")).json()
    assert (body["weight"], body["guardrail"], body["guardrail_credits"], body["guarantees"]) == (
        2,
        None,
        None,
        {},
    )


def test_outsider_gets_404_anonymous_401(world: World) -> None:
    resp = world.client(world.bob).get(tenant_url())
    assert resp.status_code == 404 and resp.json()["error"] == "not_found"
    assert world.client().get(tenant_url()).status_code == 401
    assert world.client(world.amy).get(tenant_url("nope")).status_code == 404


def test_held_gpus_by_type_and_tier_count_live_leases_only(world: World) -> None:
    node = world.nodes(world.h100, 1)[0]
    rnd = Round.objects.create(slot=timezone.now(), period_s=60)
    job = make_job(world.alpha, world.alice)
    for i, (tier, gpus, state) in enumerate(
        [("G", 2, "running"), ("G", 1, "allocated"), ("S", 3, "running"), ("B", 2, "ended")]
    ):
        Lease.objects.create(
            job=job,
            tenant=world.alpha,
            round=rnd,
            node=node,
            gpu_type=world.h100,
            tier=tier,
            preemptible=tier != "G",
            price=1,
            gpus=gpus,
            max_seconds=60,
            grace_seconds=30,
            hold_key=f"h{i}",
            state=state,
            started_at=timezone.now(),
        )
    body = world.client(world.amy).get(tenant_url()).json()
    assert body["held"] == [
        {"gpu_type": "H100", "tier": "G", "gpus": 3},
        {"gpu_type": "H100", "tier": "S", "gpus": 3},
    ]


# Tenant policy: changing


def test_admin_changes_weight_guardrail_and_guarantees_one_audit_row(world: World) -> None:
    guarantee_set(tenant=world.alpha, gpu_type=world.a100, gpus=2)
    body = {"weight": 5, "guardrail": "250.5", "guarantees": {"H100": 4, "A100": 0}}
    resp = patch(admin_in(world, world.alpha), tenant_url(), body)
    assert resp.status_code == 200, resp.json()
    assert resp.json()["weight"] == 5
    assert (resp.json()["guardrail"], resp.json()["guardrail_credits"]) == (250_500_000, "250.5")
    assert resp.json()["guarantees"] == {"H100": 4}
    alpha = Tenant.objects.get(slug="alpha")
    assert (alpha.weight, alpha.guardrail) == (5, 250_500_000)
    assert dict(Guarantee.objects.filter(tenant=alpha).values_list("gpu_type__name", "gpus")) == {"H100": 4}
    [row] = audit_rows("tenant_policy.update")
    assert row.actor == world.admin and row.tenant == alpha
    assert row.detail == {
        "weight": [1, 5],
        "guardrail": [None, 250_500_000],
        "guarantees.A100": [2, 0],
        "guarantees.H100": [0, 4],
    }


def test_guardrail_null_removes_it_and_absent_leaves_it(world: World) -> None:
    admin = admin_in(world, world.alpha)
    assert patch(admin, tenant_url(), {"guardrail": "0"}).json()["guardrail"] == 0
    assert patch(admin, tenant_url(), {"weight": 3}).json()["guardrail"] == 0
    assert patch(admin, tenant_url(), {"guardrail": None}).json()["guardrail"] is None
    assert [r.detail for r in reversed(audit_rows("tenant_policy.update"))] == [
        {"guardrail": [None, 0]},
        {"weight": [1, 3]},
        {"guardrail": [0, None]},
    ]


def test_tenant_no_op_writes_no_audit_row(world: World) -> None:
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=4)
    admin = admin_in(world, world.alpha)
    before = AuditEvent.objects.count()
    body = {"weight": 1, "guardrail": None, "guarantees": {"H100": 4, "A100": 0}}
    resp = patch(admin, tenant_url(), body)
    assert resp.status_code == 200
    assert AuditEvent.objects.count() == before


@pytest.mark.parametrize("user", ["alice", "amy"])
def test_tenant_manager_or_member_cannot_raise_own_weight_or_guarantee(world: World, user: str) -> None:
    client = world.client(getattr(world, user))
    for body in ({"weight": 100}, {"guarantees": {"H100": 8}}, {"guardrail": None}):
        resp = patch(client, tenant_url(), body)
        assert resp.status_code == 403, body
    assert Tenant.objects.get(slug="alpha").weight == 1
    assert not Guarantee.objects.exists()
    assert audit_rows("tenant_policy.update") == []


def test_outsider_change_is_404_anonymous_401(world: World) -> None:
    assert patch(world.client(world.bob), tenant_url(), {"weight": 100}).status_code == 404
    assert patch(world.client(), tenant_url(), {"weight": 100}).status_code == 401
    assert Tenant.objects.get(slug="alpha").weight == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"weight": 1_000_001}, "weight"),
        ({"weight": "heavy"}, "weight"),
        ({"guardrail": "-1"}, "guardrail"),
        ({"guardrail": "abc"}, "guardrail"),
        ({"guardrail": "0.0000001"}, "guardrail"),
        ({"guardrail": "1e30"}, "guardrail"),
        ({"guarantees": {"H100": -1}}, "guarantees.H100"),
        ({"guarantees": {"H100": "lots"}}, "guarantees.H100"),
        ({"guarantees": {"TPU": 1}}, "guarantees.TPU"),
        ({"guarantees": [1]}, "guarantees"),
        ({"weights": 3}, "weights"),
        # a good part does not survive a bad one
        ({"weight": 7, "guarantees": {"TPU": 1}}, "guarantees.TPU"),
        ({"weight": 7, "guardrail": "-5"}, "guardrail"),
    ],
)
def test_bad_tenant_policy_is_400_naming_the_field_nothing_changed(
    world: World, body: dict[str, Any], field: str
) -> None:
    admin = admin_in(world, world.alpha)
    before = AuditEvent.objects.count()
    resp = patch(admin, tenant_url(), body)
    assert resp.status_code == 400, resp.json()
    assert field in resp.json()["fields"], resp.json()
    alpha = Tenant.objects.get(slug="alpha")
    assert (alpha.weight, alpha.guardrail) == (1, None)
    assert not Guarantee.objects.exists()
    assert AuditEvent.objects.count() == before


def test_guarantee_beyond_capacity_rolls_back_the_whole_request(world: World) -> None:
    world.nodes(world.h100, 1)  # 8 H100s
    guarantee_set(tenant=world.beta, gpu_type=world.h100, gpus=6)
    admin = admin_in(world, world.alpha)
    before = AuditEvent.objects.count()
    body = {"weight": 9, "guardrail": "10", "guarantees": {"A100": 2, "H100": 3}}
    resp = patch(admin, tenant_url(), body)
    assert resp.status_code == 400, resp.json()
    assert resp.json()["fields"] == {
        "guarantees.H100": ["guarantees for H100 would total 9 GPUs but the cluster has 8"]
    }
    alpha = Tenant.objects.get(slug="alpha")
    assert (alpha.weight, alpha.guardrail) == (1, None)
    assert not Guarantee.objects.filter(tenant=alpha).exists()  # A100, set before H100 failed, rolled back
    assert AuditEvent.objects.count() == before
    body["guarantees"] = {"A100": 2, "H100": 2}
    assert patch(admin, tenant_url(), body).status_code == 200
    [row] = audit_rows("tenant_policy.update")
    assert row.detail == {
        "weight": [1, 9],
        "guardrail": [None, 10_000_000],
        "guarantees.A100": [0, 2],
        "guarantees.H100": [0, 2],
    }
    assert [r.detail for r in reversed(audit_rows("guarantee.set"))][-2:] == [
        {"gpu_type": "A100", "gpus": 2},
        {"gpu_type": "H100", "gpus": 2},
    ]


def test_admin_token_sees_only_its_tenant(world: World) -> None:
    resp = patch(admin_in(world, world.alpha), tenant_url("beta"), {"weight": 9})
    assert resp.status_code == 404
    assert patch(admin_in(world, world.beta), tenant_url("beta"), {"weight": 9}).json()["weight"] == 9


def test_tenant_service_is_admin_only_and_all_or_nothing(world: World) -> None:
    with pytest.raises(PermissionDenied):
        tenant_policy_update(actor=world.alice, tenant=world.alpha, weight=5)
    world.nodes(world.a100, 1, size=4)
    with pytest.raises(PolicyError) as err:
        tenant_policy_update(actor=world.admin, tenant=world.alpha, weight=5, guarantees={"A100": 5})
    assert err.value.field == "guarantees.A100"
    with pytest.raises(PolicyError) as err:
        tenant_policy_update(actor=world.admin, tenant=world.alpha, guardrail=10**15 + 1)
    assert err.value.field == "guardrail"
    assert Tenant.objects.get(slug="alpha").weight == 1
    tenant = tenant_policy_update(actor=world.admin, tenant=world.alpha, weight=5, guarantees={"A100": 4})
    assert tenant.weight == 5


# Audit log


def test_audit_log_is_admin_only(world: World) -> None:
    for user in (world.alice, world.amy, world.bob):
        assert world.client(user).get("/api/v1/audit").status_code == 403
    assert world.client().get("/api/v1/audit").status_code == 401


def test_audit_log_newest_first_with_filters_and_pages(world: World) -> None:
    admin = world.client(world.admin)
    patch(admin, POLICY, {"starve_rounds": 6})
    patch(admin_in(world, world.alpha), tenant_url(), {"weight": 2})
    patch(admin_in(world, world.beta), tenant_url("beta"), {"weight": 3})
    patch(admin, POLICY, {"starve_rounds": 7})
    body = admin.get("/api/v1/audit", {"page_size": 2}).json()
    assert body["count"] == AuditEvent.objects.count()
    first = body["results"][0]
    assert (first["action"], first["actor"], first["tenant"], first["detail"]) == (
        "policy.update",
        "root",
        None,
        {"starve_rounds": [6, 7]},
    )
    assert len(body["results"]) == 2 and body["next"]
    rows = admin.get("/api/v1/audit", {"action": "tenant_policy.update"}).json()["results"]
    assert [(r["tenant"], r["detail"]) for r in rows] == [
        ("beta", {"weight": [2, 3]}),
        ("alpha", {"weight": [1, 2]}),
    ]
    rows = admin.get("/api/v1/audit", {"tenant": "alpha", "action": "tenant_policy.update"}).json()["results"]
    assert [r["tenant"] for r in rows] == ["alpha"]
    assert admin.get("/api/v1/audit", {"action": "nothing.like.this"}).json()["count"] == 0


def test_audit_log_unknown_tenant_is_400(world: World) -> None:
    resp = world.client(world.admin).get("/api/v1/audit", {"tenant": "nope"})
    assert resp.status_code == 400
    assert "tenant" in resp.json()["fields"]


# GPU type price bounds (the gpu-types API) are policy too


def test_price_bound_change_is_audited_with_old_and_new_and_a_no_op_is_not(world: World) -> None:
    admin = world.client(world.admin)
    body = {"name": "H100", "memory_gb": 80, "reserve_price": "2", "max_price": "20"}
    assert admin.put("/api/v1/gpu-types/H100", body, format="json").status_code == 200
    assert audit_rows("gpu_type.update") == []
    body |= {"reserve_price": "2.5", "max_price": "25"}
    assert admin.put("/api/v1/gpu-types/H100", body, format="json").status_code == 200
    [row] = audit_rows("gpu_type.update")
    assert row.actor == world.admin
    assert row.detail == {
        "name": "H100",
        "reserve_price": [2_000_000, 2_500_000],
        "max_price": [20_000_000, 25_000_000],
    }
    body["max_price"] = "1"  # below the reserve
    resp = admin.put("/api/v1/gpu-types/H100", body, format="json")
    assert resp.status_code == 400 and "max_price" in resp.json()["fields"]
    assert len(audit_rows("gpu_type.update")) == 1
    assert GpuType.objects.get(name="H100").max_price == 25_000_000
