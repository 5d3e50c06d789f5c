"""A finished what-if's proposal saved as a proposed policy version (docs/whatif.md §The console page, step
5): the conversion to a partial snapshot, the service, and the run page's form."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from accounts.models import AuditEvent
from market.models import PolicyVersion
from market.selectors.policy_snapshot import policy_snapshot
from market.services.policy import tenant_policy_update
from tests.conftest import World
from tests.frontend.conftest import login
from tests.whatif.helpers import proposal
from whatif.models import WhatIfRun, WhatIfState
from whatif.policy import proposal_snapshot, today_policy


def _done(world: World, policy: dict[str, Any], state: str = WhatIfState.DONE) -> WhatIfRun:
    """A stored run, as the replay task leaves it (the figures are not what these tests look at)."""
    now = timezone.now()
    return WhatIfRun.objects.create(
        created_by=world.admin,
        since=now - timedelta(days=1),
        until=now,
        baseline=today_policy(),
        proposal=policy,
        state=state,
        progress=1.0,
        result={"notes": []},
    )


def test_a_proposal_becomes_a_partial_snapshot() -> None:
    policy = {
        "price_step_bp": 250,
        "min_runtime_s": 900,
        "fair_share_half_life_s": 3600,
        "starve_rounds": 5,
        "max_reservations": 1,
        "max_reserved_pct": 10,
        "fair_share_payback_s": 7200,
        "fair_reclaim": False,
        "checkpoint_min": 30,
        "types": {"H100": {"reserve": 3_000_000, "max": 9_000_000}, "A100": {"reserve": 1, "max": 2}},
        "tenants": {
            "beta": {"weight": 7, "guarantees": {"H100": 2}},
            "alpha": {"weight": 1, "guarantees": {}},
        },
    }
    assert proposal_snapshot(policy) == {
        # only the knobs a what-if proposes; the checkpoint interval is an assumption, not policy
        "market": {"price_step_bp": 250, "min_runtime_s": 900, "fair_share_half_life_s": 3600, "fair_reclaim": 0},
        "gpu_types": {
            "A100": {"reserve_price": 1, "max_price": 2},
            "H100": {"reserve_price": 3_000_000, "max_price": 9_000_000},
        },
        # every type named, 0 where none: the snapshot merges guarantees by type, 0 removing one
        "tenants": {
            "alpha": {"weight": 1, "guarantees": {"A100": 0, "H100": 0}},
            "beta": {"weight": 7, "guarantees": {"A100": 0, "H100": 2}},
        },
    }  # fmt: skip


def test_saving_a_run_makes_a_draft_that_names_it_and_changes_nothing(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    tenant_policy_update(actor=world.admin, tenant=world.alpha, guarantees={"H100": 3})
    before = policy_snapshot()
    run = _done(
        world,
        proposal(
            tenants__beta__weight=9, tenants__alpha__guarantees={}, tenants__beta__guarantees={"H100": 4}
        ),
    )
    client = login(Client(), world.admin)
    page = client.get(f"/console/whatif/{run.pk}/")
    assert (
        b"Save as proposed version" in page.content
        and f'value="what-if run {run.pk}"'.encode() in page.content
    )

    form = {"reason": f"what-if run {run.pk}", "nonce": "n-1"}
    done = client.post(f"/console/whatif/{run.pk}/propose/", form)
    version = PolicyVersion.objects.get(kind="proposed")
    assert done.status_code == 302 and done["Location"] == f"/console/versions/{version.number}/"
    assert version.detail["whatif_run"] == run.pk and version.reason == f"what-if run {run.pk}"
    tenants = version.snapshot["tenants"]
    assert tenants["beta"]["weight"] == 9 and tenants["beta"]["guarantees"] == {"H100": 4}
    assert tenants["alpha"]["guarantees"] == {}  # the guarantee the proposal dropped is gone
    assert policy_snapshot() == before  # a draft: nothing in force changed
    assert AuditEvent.objects.filter(action="policy.propose").count() == 1

    client.post(f"/console/whatif/{run.pk}/propose/", form)  # the same form sent again
    assert PolicyVersion.objects.filter(kind="proposed").count() == 1

    shown = client.get(f"/console/whatif/{run.pk}/").content.decode()
    assert f"/console/versions/{version.number}/" in shown and "Versions saved from this run" in shown
    back = client.get(f"/console/versions/{version.number}/").content.decode()
    assert f"/console/whatif/{run.pk}/" in back


def test_refusals_are_shown_on_the_run_page(world: World) -> None:
    client = login(Client(), world.admin)
    queued = _done(world, proposal(), state=WhatIfState.RUNNING)
    r = client.post(f"/console/whatif/{queued.pk}/propose/", {"reason": "x", "nonce": "a"})
    assert r.status_code == 400 and b"only a finished what-if can be saved" in r.content

    run = _done(world, proposal(tenants__beta__weight=0))  # stored before the bounds were checked, say
    r = client.post(f"/console/whatif/{run.pk}/propose/", {"reason": "try", "nonce": "b"})
    assert r.status_code == 400 and b"snapshot.tenants.beta.weight" in r.content
    r = client.post(f"/console/whatif/{run.pk}/propose/", {"reason": "x" * 1001, "nonce": "c"})
    assert (
        r.status_code == 400
        and b"at most 1000 characters" in r.content
        and b"id_propose_reason-error" in r.content
    )
    gone = _done(world, proposal())
    world.gamma.active = False  # since the run: its proposal names a tenant no longer active
    world.gamma.save()
    r = client.post(f"/console/whatif/{gone.pk}/propose/", {"reason": "x", "nonce": "d"})
    assert r.status_code == 400 and b"snapshot.tenants.gamma: is not an active tenant" in r.content
    assert not PolicyVersion.objects.filter(kind="proposed").exists()
    assert client.post("/console/whatif/999/propose/", {"reason": "x"}).status_code == 404


def test_only_admins_save_a_run(world: World) -> None:
    run = _done(world, proposal(tenants__beta__weight=9))
    assert (
        login(Client(), world.alice).post(f"/console/whatif/{run.pk}/propose/", {"reason": "x"}).status_code
        == 403
    )
    assert not PolicyVersion.objects.filter(kind="proposed").exists()
