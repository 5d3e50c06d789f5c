"""Job services on their own: who may do what, defaults, idempotency, and cancel racing the lease's end."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import AuditEvent
from market.models import Bid, EndReason, Job, JobState, LeaseState
from market.selectors.jobs import largest_gangs
from market.selectors.ledger import ledger_problems
from market.selectors.policy import market_policy
from market.services.jobs import (
    IdempotencyKeyReused,
    JobFinished,
    JobNotPending,
    NotPermitted,
    bid_amend,
    job_cancel,
    job_submit,
)
from market.services.leases import lease_stopped
from market.services.policy import policy_update
from tests.concurrency import run_together
from tests.conftest import World
from tests.market.test_jobs_cancel import start


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    world.fund(world.alpha, 1000)
    return world


def submit(w: World, user: Any = None, **change: Any) -> tuple[Job, bool]:
    args: dict[str, Any] = {
        "tenant": w.alpha,
        "submitter": user or w.amy,
        "name": "train",
        "command": "run",
        "gpus": 2,
        "bids": [(w.h100, 5_000_000)],
        "max_seconds": 3600,
        "grace_seconds": None,
    }
    return job_submit(**{**args, **change})


@pytest.mark.django_db
def test_grace_defaults_to_the_market_policy(market: World) -> None:
    policy = market_policy()
    policy.default_grace_s = 45
    policy.save()
    job, created = submit(market)
    assert created and job.grace_seconds == 45
    assert submit(market, grace_seconds=0)[0].grace_seconds == 0
    # Submits read the policy through the cache; a change through the service is seen at once.
    policy_update(actor=market.admin, default_grace_s=90)
    assert submit(market)[0].grace_seconds == 90


@pytest.mark.django_db
def test_only_members_and_admins_submit(market: World) -> None:
    w = market
    with pytest.raises(NotPermitted):
        submit(w, w.bob)
    assert Job.objects.count() == 0
    job, _ = submit(w, w.admin)
    assert job.submitter == w.admin


@pytest.mark.django_db
def test_amend_and_cancel_need_the_submitter_a_manager_or_an_admin(market: World) -> None:
    w = market
    alices, _ = submit(w, w.alice)
    for actor in (w.amy, w.bob):
        with pytest.raises(NotPermitted):
            bid_amend(job=alices, actor=actor, bids=[(w.h100, 6_000_000)])
        with pytest.raises(NotPermitted):
            job_cancel(job=alices, actor=actor)
    assert bid_amend(job=alices, actor=w.admin, bids=[(w.h100, 6_000_000)]).bid_version == 2
    amys, _ = submit(w, w.amy)
    assert bid_amend(job=amys, actor=w.amy, bids=[(w.h100, 7_000_000)]).bid_version == 2
    assert job_cancel(job=amys, actor=w.alice).state == JobState.CANCELLED
    with pytest.raises(JobNotPending):
        bid_amend(job=amys, actor=w.amy, bids=[(w.h100, 7_000_000)])
    assert list(
        AuditEvent.objects.filter(action__startswith="job.").values_list("action", "actor__username")
    ) == [
        ("job.cancel", "alice"),
        ("job.bid_amend", "amy"),
        ("job.submit", "amy"),
        ("job.bid_amend", "root"),
        ("job.submit", "alice"),
    ]


@pytest.mark.django_db
def test_submit_idempotency_in_the_service(market: World) -> None:
    w = market
    first, created = submit(w, idempotency_key="k", request_digest="d1")
    again, created_again = submit(w, idempotency_key="k", request_digest="d1", gpus=99)  # not re-checked
    assert (created, created_again, again.pk) == (True, False, first.pk)
    with pytest.raises(IdempotencyKeyReused):
        submit(w, idempotency_key="k", request_digest="d2")
    assert (Job.objects.count(), Bid.objects.count()) == (1, 1)


@pytest.mark.django_db
def test_largest_gangs_per_domain(world: World) -> None:
    from inventory.models import Node

    w = world
    w.nodes(w.h100, 3, size=8, domain="east")
    w.nodes(w.h100, 1, size=4, domain="west")
    w.nodes(w.h100, 5, size=8, domain="north")
    Node.objects.filter(topology_domain="north").update(state=Node.State.DOWN)
    w.nodes(w.a100, 1, size=2, domain="east")
    assert largest_gangs(gpu_types=[w.h100, w.a100]) == {w.h100.pk: 24, w.a100.pk: 2}


@pytest.mark.django_db
def test_a_type_without_nodes_sees_its_first_node_at_once(world: World) -> None:
    """An empty type's 0 is not cached, so a submit right after the first node joins is not refused."""
    w = world
    assert largest_gangs(gpu_types=[w.a100]) == {w.a100.pk: 0}
    w.nodes(w.a100, 1, size=4)
    assert largest_gangs(gpu_types=[w.a100]) == {w.a100.pk: 4}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(5))
def test_cancel_racing_the_lease_end_never_deadlocks(market: World, attempt: int) -> None:
    """Cancel takes the lease before the job, as lease_stopped does; either may win, the end is consistent."""
    w = market
    job, _ = submit(w)
    lease = start(job)
    work = [
        lambda: job_cancel(job=job, actor=w.amy),
        lambda: lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED),
    ]
    results = run_together(lambda i: work[i](), n=2)
    # The only refusal allowed: the job completed before the cancel got to it.
    assert [r for r in results if isinstance(r, Exception) and not isinstance(r, JobFinished)] == []
    job.refresh_from_db()
    lease.refresh_from_db()
    assert lease.state == LeaseState.ENDED
    # Cancel first: the lease stopped as cancelled. The job's own end first: the cancel was refused.
    want = JobState.CANCELLED if job.cancel_requested_at else JobState.COMPLETED
    assert (job.state, lease.end_reason) == (want, want)
    assert ledger_problems() == []


def test_pending_jobs_per_tenant_are_capped(world, settings):
    from market.models import Job
    from market.services.jobs import TooManyPending, job_submit

    settings.JOB_MAX_PENDING_PER_TENANT = 2
    world.nodes(world.h100, 1)

    def submit():
        return job_submit(
            tenant=world.alpha,
            submitter=world.amy,
            name="j",
            command="true",
            gpus=1,
            bids=[(world.h100, 3_000_000)],
            max_seconds=3600,
            grace_seconds=None,
        )

    submit()
    submit()
    with pytest.raises(TooManyPending):
        submit()
    assert Job.objects.filter(tenant=world.alpha).count() == 2
    response = world.client(world.amy).post(
        "/api/v1/tenants/alpha/jobs",
        {
            "name": "x",
            "command": "true",
            "gpus": 1,
            "max_hours": "1",
            "bids": [{"gpu_type": "H100", "limit": "3"}],
        },
        format="json",
    )
    assert response.status_code == 409 and response.json()["error"] == "too_many_pending"
