"""Tenant walls for every object type (issue 19): jobs, bids, leases, ledger entries, holds, tokens, usage and
nodes. Another tenant's member gets 404 on read, update and delete, through the other tenant's slug and
through their own slug with the other tenant's ids, in the API and in the portal, and no list, page or export
of theirs includes another tenant's objects. Nodes are the platform's, not a tenant's: no tenant's member
reads or changes them (403, nothing changed).

Agent-side walls (a node credential reaching another node's lease or command: 404; a tenant's API token on the
agent API: 401) are in tests/nodeagent/test_agent_api.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from accounts.tokens import token_create
from inventory.models import Node
from market.models import Hold, JournalEntry, Lease, LeaseUsage
from market.services import rounds
from market.services.leases import lease_running
from market.services.spend_alerts import spend_alert_create
from nodeagent.models import BootstrapToken
from tests.conftest import World
from tests.frontend.conftest import login
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alpha_objects(world: World) -> dict[str, Any]:
    """alpha's job with bids, a lease, a hold and ledger entries, and a token; beta has its own job."""
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    world.fund(world.beta, 1000)
    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 5}, name=ALPHA_JOB)
    pending = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 1}, name="pending")
    make_job(world.beta, world.bea, gpus=1, limits={world.h100: 5})
    rounds.round_tick()
    lease = Lease.objects.get(job=job)
    lease_running(lease_id=lease.pk)
    # What alpha's agent measured for its lease: the usage a tenant sees in the job API and the portal.
    LeaseUsage.objects.create(
        lease=lease, node=lease.node, gpu_seconds=7200, energy_j=2e6, samples=3600, log_tail=ALPHA_LOG
    )
    entry = JournalEntry.objects.filter(tenant=world.alpha).first()
    assert entry is not None
    return {
        "job": job.pk,
        "pending": pending.pk,
        "token": token_create(user=world.amy, tenant=world.alpha, name="amy").token.pk,
        "hold": Hold.objects.get(key=lease.hold_key).key,
        "entry": entry.pk,
        "alert": spend_alert_create(
            actor=world.alice, tenant=world.alpha, kind="spend_day", threshold=1, action="pause"
        ).rule.pk,
    }


ALPHA_JOB = "alpha-secret-job"
ALPHA_LOG = "alpha-secret-log-line"

# (method, path template, body). {slug} is the tenant named in the path; ids are always alpha's.
REQUESTS = [
    ("get", "/api/v1/tenants/{slug}/jobs/{job}", None),
    ("post", "/api/v1/tenants/{slug}/jobs/{pending}/bid", {"bids": [{"gpu_type": "H100", "limit": "9"}]}),
    ("post", "/api/v1/tenants/{slug}/jobs/{job}/cancel", None),
    ("post", "/api/v1/tenants/{slug}/jobs/{pending}/cancel", None),
    ("delete", "/api/v1/tenants/{slug}/tokens/{token}", None),
    ("get", "/api/v1/tenants/{slug}/spend-alerts/{alert}", None),
    ("patch", "/api/v1/tenants/{slug}/spend-alerts/{alert}", {"threshold": "9"}),
    ("delete", "/api/v1/tenants/{slug}/spend-alerts/{alert}", None),
    ("post", "/api/v1/tenants/{slug}/spend-alerts/{alert}/lift", None),
    ("get", "/api/v1/tenants/{slug}/spend-alerts/{alert}/deliveries", None),
]
TENANT_ONLY = [
    ("get", "/api/v1/tenants/{slug}/jobs", None),
    ("get", "/api/v1/tenants/{slug}/ledger", None),
    ("get", "/api/v1/tenants/{slug}/balance", None),
    ("get", "/api/v1/tenants/{slug}/tokens", None),
    ("get", "/api/v1/tenants/{slug}/policy", None),
    ("get", "/api/v1/tenants/{slug}/hold-policy", None),
    ("get", "/api/v1/tenants/{slug}/spend-alerts", None),
    ("get", "/api/v1/tenants/{slug}/spend", None),
    (
        "post",
        "/api/v1/tenants/{slug}/jobs/estimate",
        {
            "name": "x",
            "command": "y",
            "gpus": 1,
            "max_hours": "1",
            "bids": [{"gpu_type": "H100", "limit": "3"}],
        },
    ),
    (
        "post",
        "/api/v1/tenants/{slug}/jobs",
        {
            "name": "x",
            "command": "y",
            "gpus": 1,
            "max_hours": "1",
            "bids": [{"gpu_type": "H100", "limit": "3"}],
        },
    ),
    ("post", "/api/v1/tenants/{slug}/tokens", {"name": "x"}),
    ("post", "/api/v1/tenants/{slug}/topups", {"amount": "1", "key": "x"}),
    ("patch", "/api/v1/tenants/{slug}/policy", {"weight": 5}),
    ("patch", "/api/v1/tenants/{slug}/hold-policy", {"sized_by_prediction": True}),
    ("post", "/api/v1/tenants/{slug}/spend-alerts", {"kind": "spend_day", "threshold": "5"}),
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


def test_usage_is_seen_by_its_tenant_only(world: World, alpha_objects: dict[str, Any]) -> None:
    """A lease's measured usage and the job's log tail: in alpha's job (the positive control), nowhere in
    anything beta's members can read, API or portal."""
    job = alpha_objects["job"]
    mine = world.client(world.amy).get(f"/api/v1/tenants/alpha/jobs/{job}").json()
    assert mine["leases"][0]["usage"]["gpu_seconds"] == 7200 and ALPHA_LOG in mine["log_tail"]
    for who in (world.bob, world.bea):
        api = world.client(who)
        for slug in ("alpha", "beta"):
            assert api.get(f"/api/v1/tenants/{slug}/jobs/{job}").status_code == 404
        seen = [
            api.get("/api/v1/tenants/beta/jobs?page_size=500").content,
            api.get("/api/v1/tenants/beta/ledger?page_size=500").content,
            api.get("/api/v1/tenants/beta/balance").content,
        ]
        seen += [api.get(f"/api/v1/tenants/beta/jobs/{j['id']}").content for j in _results(api, "jobs")]
        portal = login(Client(), who)
        for url in ("/t/beta/", "/t/beta/jobs/", "/t/beta/spend/", "/t/beta/spend.csv", "/t/beta/tokens/"):
            response = portal.get(url)
            assert response.status_code == 200, url
            seen.append(response.getvalue())  # streamed (the CSV) or not
        for url in (f"/t/alpha/jobs/{job}/", f"/t/beta/jobs/{job}/", "/t/alpha/spend.csv"):
            assert portal.get(url).status_code == 404, url
        for body in seen:
            assert ALPHA_LOG.encode() not in body and ALPHA_JOB.encode() not in body


def _results(api: Any, what: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = api.get(f"/api/v1/tenants/beta/{what}?page_size=500").json()["results"]
    return results


NODE_REQUESTS = [
    ("get", "/api/v1/nodes", None),
    ("get", "/api/v1/nodes/{node}", None),
    ("post", "/api/v1/nodes/{node}/drain", None),
    ("post", "/api/v1/nodes/{node}/resume", None),
    ("post", "/api/v1/nodes/{node}/retire", None),
    ("post", "/api/v1/nodes/bootstrap-tokens", {"name": "intruder"}),
]


@pytest.mark.parametrize("who", ["alice", "amy", "bob", "bea"])
def test_no_tenants_member_reads_or_changes_nodes(
    world: World, alpha_objects: dict[str, Any], who: str
) -> None:
    """Nodes (and their GPUs, health and running leases) are the platform's: managers and members of any
    tenant, the one whose lease runs there included, get 403, and nothing changes."""
    node = Lease.objects.get(job_id=alpha_objects["job"]).node
    api = world.client(getattr(world, who))
    for method, template, body in NODE_REQUESTS:
        path = template.format(node=node.name)
        response = getattr(api, method)(path, body, format="json")
        assert response.status_code == 403, (who, path, response.status_code)
        assert response.json()["error"] == "permission_denied"
    assert Node.objects.get(pk=node.pk).state == Node.State.UP
    assert not BootstrapToken.objects.exists()
    portal = login(Client(), getattr(world, who))
    assert portal.get("/console/nodes/").status_code == 403
    for action in ("drain", "resume", "retire"):
        assert portal.post(f"/console/nodes/{node.name}/{action}/").status_code == 403
    assert portal.post("/console/nodes/bootstrap-token/", {"name": "intruder"}).status_code == 403
    assert Node.objects.get(pk=node.pk).state == Node.State.UP
    assert not BootstrapToken.objects.exists()


@pytest.mark.parametrize("who", ["bob", "bea"])
def test_portal_writes_to_another_tenants_objects_are_404(
    world: World, alpha_objects: dict[str, Any], who: str
) -> None:
    """The portal's forms (submit, amend, cancel, revoke) through alpha's slug and through beta's own with
    alpha's ids: 404, nothing written."""
    from market.models import Job

    portal = login(Client(), getattr(world, who))
    job, pending, token = alpha_objects["job"], alpha_objects["pending"], alpha_objects["token"]
    before = (JournalEntry.objects.count(), Hold.objects.count(), Job.objects.count())
    submit = {"name": "x", "command": "y", "gpus": "1", "max_hours": "1", "bids-0-gpu_type": "H100"}
    submit |= {"bids-0-limit": "3", "bids-TOTAL_FORMS": "1", "bids-INITIAL_FORMS": "0"}
    amend = {
        "bids-0-gpu_type": "H100",
        "bids-0-limit": "9",
        "bids-TOTAL_FORMS": "1",
        "bids-INITIAL_FORMS": "0",
    }
    assert portal.post("/t/alpha/jobs/new/", submit).status_code == 404
    for slug in ("alpha", "beta"):
        for url, body in (
            (f"/t/{slug}/jobs/{pending}/amend/", amend),
            (f"/t/{slug}/jobs/{pending}/cancel/", {}),
            (f"/t/{slug}/jobs/{job}/cancel/", {}),
            (f"/t/{slug}/tokens/{token}/revoke/", {}),
        ):
            assert portal.get(url).status_code in (404, 405), url
            assert portal.post(url, body).status_code == 404, url
    assert (JournalEntry.objects.count(), Hold.objects.count(), Job.objects.count()) == before
    for alpha_job in world.alpha.jobs.all():
        assert alpha_job.cancel_requested_at is None and alpha_job.bid_version == 1
    from accounts.models import ApiToken

    assert ApiToken.objects.get(pk=token).revoked_at is None
