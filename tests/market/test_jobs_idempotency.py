"""Idempotent submit: a replay returns the first response and writes nothing; another body is a 409; racing
submits with one key make one job (PostgreSQL, real threads)."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import AuditEvent
from market.models import Bid, Job, JobState
from tests.concurrency import run_together
from tests.conftest import World

URL = "/api/v1/tenants/{}/jobs"


def body(**change: Any) -> dict[str, Any]:
    return {
        "name": "train",
        "command": "python train.py",
        "gpus": 2,
        "bids": [{"gpu_type": "H100", "limit": "5"}],
        "max_hours": "1",
        **change,
    }


def counts() -> tuple[int, int, int]:
    return Job.objects.count(), Bid.objects.count(), AuditEvent.objects.filter(action="job.submit").count()


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    return world


@pytest.mark.django_db
def test_replay_returns_the_first_response_and_writes_nothing(market: World) -> None:
    client = market.client(market.amy)
    first = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert first.status_code == 201, first.json()
    before = counts()
    assert before == (1, 1, 1)
    # The same body with its keys in another order is the same request.
    reordered = dict(reversed(list(body().items())))
    again = client.post(URL.format("alpha"), reordered, format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert (again.status_code, again.content) == (201, first.content)
    assert counts() == before
    job = Job.objects.get()
    assert (job.idempotency_key, len(job.request_digest), job.first_response) == ("run-1", 64, first.json())


@pytest.mark.django_db
def test_replay_after_the_job_moved_on_is_still_the_first_response(market: World) -> None:
    client = market.client(market.amy)
    first = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    client.post(f"{URL.format('alpha')}/{first.json()['id']}/cancel")
    Job.objects.update(state=JobState.CANCELLED)
    again = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.json()["state"] == "pending"


@pytest.mark.django_db
def test_same_key_other_body_is_409(market: World) -> None:
    client = market.client(market.amy)
    client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    before = counts()
    for other in (body(gpus=3), body(name="other")):
        resp = client.post(URL.format("alpha"), other, format="json", HTTP_IDEMPOTENCY_KEY="run-1")
        assert resp.status_code == 409, resp.json()
        assert resp.json()["error"] == "idempotency_key_reused"
    assert counts() == before


@pytest.mark.django_db
def test_keys_are_per_tenant_and_no_key_means_no_dedup(market: World) -> None:
    w = market
    a = w.client(w.alice).post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    b = w.client(w.bob).post(URL.format("beta"), body(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]
    plain = w.client(w.alice)
    ids = {plain.post(URL.format("alpha"), body(), format="json").json()["id"] for _ in range(2)}
    assert len(ids) == 2
    assert Job.objects.filter(idempotency_key="").count() == 2


@pytest.mark.django_db
def test_a_rejected_body_does_not_use_up_the_key(market: World) -> None:
    client = market.client(market.amy)
    bad = client.post(URL.format("alpha"), body(gpus=0), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert bad.status_code == 400
    good = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert good.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_with_one_key_make_one_job(market: World) -> None:
    n = 8
    clients = [market.client(market.amy) for _ in range(n)]

    def submit(i: int) -> Any:
        return clients[i].post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="race")

    results = run_together(submit, n)
    assert all(not isinstance(r, Exception) for r in results), results
    assert {r.status_code for r in results} == {201}
    assert len({r.content for r in results}) == 1  # byte for byte
    assert counts() == (1, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_with_one_key_and_different_bodies(market: World) -> None:
    n = 6
    clients = [market.client(market.amy) for _ in range(n)]

    def submit(i: int) -> Any:
        return clients[i].post(
            URL.format("alpha"), body(gpus=1 + i % 2), format="json", HTTP_IDEMPOTENCY_KEY="r"
        )

    results = run_together(submit, n)
    assert all(not isinstance(r, Exception) for r in results), results
    job = Job.objects.get()
    for r in results:
        want = 201 if r.status_code == 201 else 409
        assert r.status_code == want
        if want == 201:
            assert r.json()["gpus"] == job.gpus
    assert sum(r.status_code == 201 for r in results) == 3
    assert counts() == (1, 1, 1)


@pytest.mark.django_db
def test_replay_is_answered_even_when_the_checks_refuse_the_body_today(market: World, settings: Any) -> None:
    """A new submit is not looked up first (the unique index catches a repeat); a body the checks refuse
    is, so its replay still gets the first response."""
    client = market.client(market.amy)
    first = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert first.status_code == 201, first.json()
    market.h100.max_price = 4_000_000  # the bid's 5 credits are above it now
    market.h100.save(update_fields=["max_price"])
    settings.JOB_MAX_PENDING_PER_TENANT = 1  # and alpha is at its cap
    before = counts()
    again = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert (again.status_code, again.content) == (201, first.content)
    other = client.post(URL.format("alpha"), body(gpus=3), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert (other.status_code, other.json()["error"]) == (409, "idempotency_key_reused")
    fresh = client.post(URL.format("alpha"), body(), format="json", HTTP_IDEMPOTENCY_KEY="run-2")
    assert (fresh.status_code, fresh.json()["error"]) == (409, "too_many_pending")
    assert counts() == before
