"""Tenant walls for every object type the API serves (issue 19): another tenant's member gets 404 on read,
update and delete, through the other tenant's slug and through their own slug with the other tenant's ids,
and no list of theirs includes another tenant's objects. (Nodes and usage have no tenant API yet.)"""

from __future__ import annotations

from typing import Any

import pytest

from accounts.tokens import token_create
from market.models import Hold, JournalEntry, Lease
from market.services import rounds
from market.services.leases import lease_running
from tests.conftest import World
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alpha_objects(world: World) -> dict[str, Any]:
    """alpha's job with bids, a lease, a hold and ledger entries, and a token; beta has its own job."""
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    world.fund(world.beta, 1000)
    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 5})
    pending = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 1}, name="pending")
    make_job(world.beta, world.bea, gpus=1, limits={world.h100: 5})
    rounds.round_tick()
    lease = Lease.objects.get(job=job)
    lease_running(lease_id=lease.pk)
    return {
        "job": job.pk,
        "pending": pending.pk,
        "token": token_create(user=world.amy, tenant=world.alpha, name="amy").token.pk,
        "hold": Hold.objects.get(key=lease.hold_key).key,
        "entry": JournalEntry.objects.filter(tenant=world.alpha).first().pk,
    }


# (method, path template, body). {slug} is the tenant named in the path; ids are always alpha's.
REQUESTS = [
    ("get", "/api/v1/tenants/{slug}/jobs/{job}", None),
    ("post", "/api/v1/tenants/{slug}/jobs/{pending}/bid", {"bids": [{"gpu_type": "H100", "limit": "9"}]}),
    ("post", "/api/v1/tenants/{slug}/jobs/{job}/cancel", None),
    ("post", "/api/v1/tenants/{slug}/jobs/{pending}/cancel", None),
    ("delete", "/api/v1/tenants/{slug}/tokens/{token}", None),
]
TENANT_ONLY = [
    ("get", "/api/v1/tenants/{slug}/jobs", None),
    ("get", "/api/v1/tenants/{slug}/ledger", None),
    ("get", "/api/v1/tenants/{slug}/balance", None),
    ("get", "/api/v1/tenants/{slug}/tokens", None),
    ("get", "/api/v1/tenants/{slug}/policy", None),
    ("get", "/api/v1/tenants/{slug}/hold-policy", None),
    (
        "post",
        "/api/v1/tenants/{slug}/jobs",
        {
            "name": "x",
            "command": "y",
            "gpus": 1,
            "max_hours": 1,
            "bids": [{"gpu_type": "H100", "limit": "3"}],
        },
    ),
    ("post", "/api/v1/tenants/{slug}/tokens", {"name": "x"}),
    ("post", "/api/v1/tenants/{slug}/topups", {"amount": "1", "key": "x"}),
    ("patch", "/api/v1/tenants/{slug}/policy", {"weight": 5}),
    ("patch", "/api/v1/tenants/{slug}/hold-policy", {"sized_by_prediction": True}),
]


@pytest.mark.parametrize("who", ["bob", "bea"])
def test_another_tenants_member_gets_404_for_everything(
    world: World, alpha_objects: dict[str, Any], who: str
) -> None:
    client = world.client(getattr(world, who))
    before = (JournalEntry.objects.count(), Hold.objects.count(), world.alpha.jobs.count())
    for method, template, body in REQUESTS + TENANT_ONLY:
        for slug in ("alpha", "beta"):
            if slug == "beta" and (method, template, body) in TENANT_ONLY:
                continue  # their own tenant: allowed
            path = template.format(slug=slug, **alpha_objects)
            resp = getattr(client, method)(path, body, format="json")
            assert resp.status_code == 404, (path, resp.status_code, resp.content[:200])
            assert resp.json()["error"] == "not_found"
    assert (JournalEntry.objects.count(), Hold.objects.count(), world.alpha.jobs.count()) == before
    for job in world.alpha.jobs.all():
        assert job.cancel_requested_at is None and job.bid_version == 1


def test_lists_never_include_another_tenants_objects(world: World, alpha_objects: dict[str, Any]) -> None:
    client = world.client(world.bob)
    jobs = client.get("/api/v1/tenants/beta/jobs?page_size=500").json()["results"]
    assert jobs and not {j["id"] for j in jobs} & set(world.alpha.jobs.values_list("pk", flat=True))
    entries = client.get("/api/v1/tenants/beta/ledger?page_size=500").json()["results"]
    assert entries and all(e["tenant"] == "beta" for e in entries)
    assert alpha_objects["hold"] not in {e["hold"] for e in entries}
    tokens = client.get("/api/v1/tenants/beta/tokens?page_size=500").json()["results"]
    assert alpha_objects["token"] not in {t["id"] for t in tokens}
    detail = client.get(f"/api/v1/tenants/beta/jobs/{jobs[0]['id']}").json()
    assert all(
        lease["id"] not in Lease.objects.filter(tenant=world.alpha).values_list("pk", flat=True)
        for lease in detail.get("leases", [])
    )
