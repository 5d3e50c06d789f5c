"""Why a lease was preempted: the round commit keeps the allocator's rule and the job it made room for, the
job API and the portal show them within the tenant wall, and the metrics count preemptions by rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocator import PREEMPT_NAMES
from market.models import Job, Lease, LeaseState, PreemptReason, Round, RoundState
from market.selectors.explain import lease_end_sentence, lost_work_clause
from market.selectors.jobs import job_detail
from market.selectors.lost_work import gpu_time
from market.selectors.policy import market_policy
from market.selectors.preemptions import preemption_of
from market.services import rounds
from market.services.guarantees import guarantee_set
from market.services.leases import lease_running, lease_stopped
from tests.conftest import PASSWORD, World
from tests.market.round_helpers import make_job
from tests.ops.test_metrics import samples, scrape
from tests.security.test_schemathesis import schema  # loaded at collection: it makes a request

pytestmark = pytest.mark.django_db


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 2, size=8)
    for tenant in (world.alpha, world.beta, world.gamma):
        world.fund(tenant, 1000)
    policy = market_policy()
    policy.min_runtime_s = 0  # the leases are seconds old when they are preempted
    policy.save()
    return world


def _beta_fills_the_cluster(w: World) -> Round:
    """beta borrows all 16 GPUs, as two running 8-GPU leases."""
    jobs = [make_job(w.beta, w.bob, gpus=8, limits={w.h100: 6}, name=f"b{i}") for i in range(2)]
    r1 = rounds.round_tick()
    assert r1 is not None and r1.winners == 2, r1 and r1.error
    for job in jobs:
        lease_running(lease_id=job.leases.get().pk)
    return r1


def _next_round(after: Round, *, stop_after: str | None = None) -> Round:
    """The next period's round; with stop_after, advanced that far and then resumed (the commit replayed from
    the stored snapshot in a fresh call, as another worker would)."""
    slot = rounds.slot_of(after.slot + timedelta(seconds=after.period_s), after.period_s)
    rnd = Round.objects.create(slot=slot, period_s=after.period_s)
    if stop_after is not None:
        assert rounds.round_advance(round_id=rnd.pk, stop_after=RoundState(stop_after)).state == stop_after
    done = rounds.round_advance(round_id=rnd.pk)
    assert done.state == RoundState.DISPATCHED, done.error
    return done


def _guarantee_reclaim(w: World, *, stop_after: str | None = None) -> tuple[Round, Lease, Job]:
    guarantee_set(tenant=w.alpha, gpu_type=w.h100, gpus=8)
    r1 = _beta_fills_the_cluster(w)
    mine = make_job(w.alpha, w.alice, gpus=8, limits={w.h100: 3}, name="alpha-guaranteed")
    r2 = _next_round(r1, stop_after=stop_after)
    assert r2.preemptions == 1 and r2.winners == 1, r2.counters
    return r2, Lease.objects.get(state=LeaseState.STOPPING), mine


def test_names_match_the_allocator() -> None:
    assert set(PreemptReason.values) == set(PREEMPT_NAMES.values())


@pytest.mark.parametrize("stop_after", [None, RoundState.FROZEN, RoundState.CLEARED])
def test_guarantee_reclaim_records_rule_round_and_claimant(market: World, stop_after: str | None) -> None:
    r2, victim, mine = _guarantee_reclaim(market, stop_after=stop_after)
    assert victim.end_reason == "preempted" and victim.tenant_id == market.beta.pk
    assert (victim.preempt_reason, victim.preempted_round_id, victim.preempted_for_id) == (
        "reclaim_guarantee",
        r2.pk,
        mine.pk,
    )
    assert mine.leases.get().tier == "G"
    # The other beta lease kept running, with nothing recorded.
    other = Lease.objects.exclude(pk=victim.pk).get(tenant=market.beta)
    assert (other.state, other.preempt_reason, other.preempted_for_id) == (LeaseState.RUNNING, "", None)


def test_fair_reclaim_records_fair_share(market: World) -> None:
    w = market
    # No guarantees: beta (weight 2) holds all the excess, gamma (weight 3) none of its 9.6 GPUs' share.
    r1 = _beta_fills_the_cluster(w)
    mine = make_job(w.gamma, w.carl, gpus=8, limits={w.h100: 3}, name="gamma-fair")
    r2 = _next_round(r1)
    assert r2.preemptions == 1 and r2.counters.get("fair_reclaimed_gangs") == 1, r2.counters
    victim = Lease.objects.get(state=LeaseState.STOPPING)
    assert victim.tenant_id == w.beta.pk
    assert (victim.preempt_reason, victim.preempted_round_id, victim.preempted_for_id) == (
        "fair_share",
        r2.pk,
        mine.pk,
    )
    assert mine.leases.get().tier == "B"


def _detail(w: World, user: Any, job: Job) -> dict[str, Any]:
    resp = w.client(user, tenant=job.tenant).get(f"/api/v1/tenants/{job.tenant.slug}/jobs/{job.pk}")
    assert resp.status_code == 200, resp.content
    body: dict[str, Any] = resp.json()
    return body


def test_api_shows_the_rule_within_the_tenant_wall(market: World) -> None:
    w = market
    r2, victim, mine = _guarantee_reclaim(w)
    lost = lost_work_clause(victim)  # the work lost since the job started: tests/market/test_lost_work.py
    expected_text = (
        f"Being preempted in round {r2.pk} to restore another team's guaranteed H100 GPUs{lost}: the job is sent "
        f"SIGTERM and has {victim.grace_seconds} seconds to save a checkpoint before SIGKILL, then goes back "
        "to the queue."
    )
    for user in (w.bob, w.bea):  # beta's manager and member: the rule, not whose job
        body = _detail(w, user, victim.job)
        lease = next(x for x in body["leases"] if x["id"] == victim.pk)
        assert lease["end_reason"] == "preempted"
        assert lease["preemption"] == {
            "reason": "reclaim_guarantee",
            "label": "Guarantee reclaim",
            "round": r2.pk,
            "for_own_tenant": False,
            "for_job": None,
            "for_tenant": None,
            "text": expected_text,
            "lost_gpu_s": victim.lost_gpu_s,
            "lost_gpu_hours": round((victim.lost_gpu_s or 0.0) / 3600, 4),
            "lost_work": gpu_time(victim.lost_gpu_s or 0.0),
        }
        assert "alpha" not in str(lease) and mine.name not in str(body)
        assert all(x["preemption"] is None for x in body["leases"] if x["id"] != victim.pk)
    admin = next(x for x in _detail(w, w.admin, victim.job)["leases"] if x["id"] == victim.pk)["preemption"]
    assert (admin["for_own_tenant"], admin["for_job"], admin["for_tenant"]) == (False, mine.pk, "alpha")
    assert admin["text"].startswith(
        f"Being preempted in round {r2.pk} to restore team alpha's guaranteed H100 GPUs (job {mine.pk}){lost}:"
    )
    # The claimant's team cannot open the victim's job at all.
    resp = w.client(w.alice).get(f"/api/v1/tenants/beta/jobs/{victim.job_id}")
    assert resp.status_code == 404


def test_api_response_matches_the_schema(market: World) -> None:
    """What tests/security/test_schemathesis.py checks on every response, here on a preempted lease's, for a
    member and for a platform admin."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from accounts.tokens import token_create

    w = market
    _, victim, _ = _guarantee_reclaim(w)
    op = schema.find_operation_by_path("GET", "/api/v1/tenants/{slug}/jobs/{job_id}")
    assert op is not None
    # As the schemathesis tests do: a request must not close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        for user in (w.bea, w.admin):
            secret = token_create(user=user, tenant=w.beta, name="schema").secret
            case = op.Case(
                path_parameters={"slug": "beta", "job_id": victim.job_id},
                headers={"Authorization": f"Bearer {secret}"},
            )
            response = case.call()
            assert response.status_code == 200
            assert any(x["preemption"] for x in response.json()["leases"])
            case.validate_response(response)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_a_claimant_of_the_same_tenant_is_named_to_its_members(market: World) -> None:
    """Reclaim never takes the claimant's own leases today; were it to, the member would see which job."""
    w = market
    r2, victim, _ = _guarantee_reclaim(w)
    own = make_job(w.beta, w.bea, gpus=1, limits={w.h100: 3}, name="beta-own")
    Lease.objects.filter(pk=victim.pk).update(preempted_for=own)
    job = job_detail(tenant=w.beta, job_id=victim.job_id)
    assert job is not None
    lease = next(x for x in job.lease_rows if x.pk == victim.pk)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    p = preemption_of(lease, admin=False)
    assert p is not None and (p.for_own_tenant, p.for_job, p.for_tenant) == (True, own.pk, None)


def test_portal_sentence_once_stopped(market: World) -> None:
    w = market
    r2, victim, _ = _guarantee_reclaim(w)
    assert victim.stop_requested_at is not None
    lease_stopped(lease_id=victim.pk, now=victim.stop_requested_at + timedelta(seconds=20))
    job = job_detail(tenant=w.beta, job_id=victim.job_id)
    assert job is not None
    lease = next(x for x in job.lease_rows if x.pk == victim.pk)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    sentence = lease_end_sentence(lease, gpu_seconds=160.0, exit_code=None)
    assert sentence.startswith(
        f"Preempted in round {r2.pk} after 20 seconds to restore another team's guaranteed H100 GPUs "
        f"(a borrowed lease may be taken back){lost_work_clause(lease)}; charged "
    ), sentence
    assert sentence.endswith(
        "and the job went back to the queue: it resumes from its checkpoint, if it saved one, when it wins "
        "a round again."
    )
    client = Client()
    client.login(username="bea", password=PASSWORD)
    page = client.get(f"/t/beta/jobs/{victim.job_id}/").content.decode()
    assert f"Preempted in round {r2.pk} after 20 seconds to restore another team&#x27;s guaranteed" in page


def test_a_lease_preempted_before_reasons_were_recorded(market: World) -> None:
    w = market
    _, victim, _ = _guarantee_reclaim(w)
    Lease.objects.filter(pk=victim.pk).update(preempt_reason="", preempted_for=None, preempted_round=None)
    lease_stopped(lease_id=victim.pk, now=timezone.now())
    job = job_detail(tenant=w.beta, job_id=victim.job_id)
    assert job is not None
    lease = next(x for x in job.lease_rows if x.pk == victim.pk)  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
    assert preemption_of(lease, admin=True) is None
    assert "because another team's guarantee or fair share needed these GPUs" in lease_end_sentence(
        lease, gpu_seconds=0.0, exit_code=None
    )
    assert next(x for x in _detail(w, w.bea, job)["leases"] if x["id"] == victim.pk)["preemption"] is None


def test_admin_round_page_lists_rule_and_claimant(market: World) -> None:
    w = market
    r2, victim, mine = _guarantee_reclaim(w)
    client = Client()
    client.login(username="root", password=PASSWORD)
    page = client.get(f"/console/rounds/{r2.pk}/").content.decode()
    row = page.split(f'<tr data-lease="{victim.pk}">')[1].split("</tr>")[0]
    assert '<td data-field="rule">Guarantee reclaim</td>' in row
    assert f'<td data-field="for">alpha job {mine.pk}</td>' in row


def test_metrics_count_preemptions_by_rule(market: World, settings: Any) -> None:
    settings.METRICS_TOKEN = "t0ken-for-scrape"
    _guarantee_reclaim(market)
    s = samples(scrape(HTTP_AUTHORIZATION="Bearer t0ken-for-scrape"))
    assert s["gpumarket_round_preemptions_total", (("reason", "reclaim_guarantee"),)] == 1
    assert s["gpumarket_round_preemptions_total", (("reason", "fair_share"),)] == 0
