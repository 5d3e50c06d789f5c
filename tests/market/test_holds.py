"""Holds sized by prediction (docs/predictions.md §Holds): the round holds the predicted p90 for an opted-in
tenant, and a lease that outlives its hold is extended from the balance or stopped, with a warning first."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import AuditEvent
from market.models import (
    CommandKind,
    EndReason,
    Hold,
    HoldPolicy,
    JobState,
    Lease,
    LeaseGpu,
    LeaseState,
    OnHoldEnd,
)
from market.selectors.holds import STOP_MARGIN, WARN_BEFORE, stop_time
from market.selectors.ledger import tenant_balance
from market.services import rounds
from market.services.hold_policy import hold_policy_set
from market.services.holds import leases_hold_check
from market.services.leases import lease_stopped
from market.services.ledger_bulk import ledger_hold
from tests.conftest import PASSWORD
from tests.market.predict_helpers import finished_job, lease_for
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def market(world):
    world.node = world.nodes(world.h100, 2, size=8)[0]
    for tenant in (world.alpha, world.beta):
        world.fund(tenant, 1000)
    return world


def _history(w, runtimes=(3000, 3000, 3000, 3000, 3600)):
    for r in runtimes:
        finished_job(w.alpha, w.alice, w.node, runtime_s=r, ended_ago_s=3600)


def _opt_in(w, choice=OnHoldEnd.EXTEND):
    hold_policy_set(tenant=w.alpha, actor=w.alice, sized_by_prediction=True, on_hold_end=choice)


def _available(tenant) -> int:
    return tenant_balance(tenant=tenant).available


def test_round_holds_the_predicted_p90_for_an_opted_in_tenant(market):
    w = market
    _history(w)
    _opt_in(w)
    sized = make_job(w.alpha, w.alice, gpus=2, limits={w.h100: 5}, hours=10, name="train-8")
    cold = make_job(w.alpha, w.alice, gpus=3, limits={w.h100: 5}, hours=10, name="new", age_s=1)
    cold.command = "bash other.sh"  # nothing like it has finished
    cold.save()
    other = make_job(w.beta, w.bob, gpus=2, limits={w.h100: 5}, hours=10, name="train-8")
    rounds.round_tick()
    by_job = {lease.job_id: lease for lease in Lease.objects.all()}
    # p90 of (3000 x4, 3600) = 3360 s; the cold-start job and the other tenant hold for max hours.
    assert by_job[sized.pk].hold_seconds == 3360
    assert by_job[cold.pk].hold_seconds == 36000 and by_job[other.pk].hold_seconds == 36000
    lease = by_job[sized.pk]
    # Each lease's share of its tenant's round hold (alpha's two winners share one, beta's is its own).
    assert lease.hold_share == -(-2 * lease.price * 3360 // 3600)  # rounded up
    assert by_job[other.pk].hold_share == 2 * by_job[other.pk].price * 10
    alpha = Hold.objects.get(key=lease.hold_key)
    assert alpha.amount == (lease.hold_share or 0) + (by_job[cold.pk].hold_share or 0) and alpha.parts == 2
    assert Hold.objects.get(key=by_job[other.pk].hold_key).amount == by_job[other.pk].hold_share


def _running(w, *, hold_s=3600, max_s=36000, age_s=0, price=2_000_000, gpus=2):
    job = make_job(w.alpha, w.alice, gpus=gpus, limits={w.h100: 5}, hours=max_s / 3600)
    job.state = JobState.RUNNING
    job.save()
    lease = lease_for(job, w.node, price=price, max_seconds=max_s)
    lease.hold_seconds = hold_s
    lease.started_at = timezone.now() - timedelta(seconds=age_s)
    lease.save()
    LeaseGpu.objects.bulk_create(LeaseGpu(lease=lease, gpu=g) for g in w.node.gpus.all()[:gpus])
    ledger_hold(tenant=w.alpha, amount=gpus * price * hold_s // 3600, key=lease.hold_key)
    return lease


def _warn_time(lease):
    return stop_time(lease) - WARN_BEFORE


def test_extend_from_the_balance_once_per_extension(market):
    w = market
    _opt_in(w, OnHoldEnd.EXTEND)
    lease = _running(w)
    before = _available(w.alpha)
    early = leases_hold_check(fence=0, now=_warn_time(lease) - timedelta(seconds=1))
    assert early.extended == [] and early.warned == []
    got = leases_hold_check(fence=0, now=_warn_time(lease))
    assert got.extended == [lease.pk]
    lease.refresh_from_db()
    # As long again: 2 GPUs x 1 h x 2 credits more held.
    assert lease.hold_seconds == 7200 and lease.hold_extensions == 1
    assert _available(w.alpha) == before - 4_000_000
    assert Hold.objects.get(key=lease.hold_key).amount == 8_000_000
    # The same tick again: the new hold end is far away, nothing more.
    assert leases_hold_check(fence=0, now=_warn_time(lease) - timedelta(minutes=1)).extended == []
    assert AuditEvent.objects.filter(action="lease.hold_extended").count() == 1
    call_command("ledger_check", stdout=StringIO())


def test_extension_never_passes_max_hours(market):
    w = market
    _opt_in(w)
    lease = _running(w, hold_s=3000, max_s=3600)
    leases_hold_check(fence=0, now=_warn_time(lease))
    lease.refresh_from_db()
    assert lease.hold_seconds == 3600  # 600 s more, not 3000
    # At max hours the lease is no longer sized: expiry (max hours) takes over, not the hold check.
    assert leases_hold_check(fence=0, now=lease.started_at + timedelta(hours=2)).stopped == []


def test_extend_with_too_little_balance_warns_then_stops_at_the_hold(market):
    w = market
    _opt_in(w, OnHoldEnd.EXTEND)
    lease = _running(
        w, price=20_000_000, hold_s=3600 * 20, max_s=3600 * 40
    )  # 2 GPUs x 20 h x 20 = 800 of 1000 credits held
    available = _available(w.alpha)
    assert available < 800_000_000  # extension would need 800 more
    warned = leases_hold_check(fence=0, now=_warn_time(lease))
    assert warned.extended == [] and warned.warned == [lease.pk] and warned.stopped == []
    lease.refresh_from_db()
    assert lease.hold_warned_at is not None and lease.state == LeaseState.RUNNING
    event = AuditEvent.objects.get(action="lease.hold_warning")
    assert "balance" in event.detail["why"]
    # Warned once, however many ticks; stopped at the stop time, in time for the grace period.
    assert leases_hold_check(fence=0, now=_warn_time(lease) + timedelta(minutes=5)).warned == []
    stop_at = stop_time(lease)
    assert (
        stop_at
        == lease.started_at + timedelta(seconds=lease.hold_seconds - lease.grace_seconds) - STOP_MARGIN
    )
    stopped = leases_hold_check(fence=0, now=stop_at)
    assert stopped.stopped == [lease.pk]
    lease.refresh_from_db()
    assert lease.state == LeaseState.STOPPING and lease.end_reason == EndReason.HOLD_SPENT
    assert lease.commands.filter(kind=CommandKind.RELEASE).exists()
    assert _available(w.alpha) == available  # nothing extended
    # The agent measured more than the hold pays for: the charge stops at the hold.
    from market.models import LeaseUsage

    LeaseUsage.objects.create(lease=lease, node=w.node, gpu_seconds=2 * 3600 * 30, samples=9)
    lease_stopped(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.charged == Hold.objects.get(key=lease.hold_key).amount == 800_000_000
    assert lease.job.state == JobState.EXPIRED
    call_command("ledger_check", stdout=StringIO())


def test_stop_choice_warns_first_and_never_extends(market):
    w = market
    _opt_in(w, OnHoldEnd.STOP)
    lease = _running(w)
    before = _available(w.alpha)
    got = leases_hold_check(fence=0, now=_warn_time(lease))
    assert got.warned == [lease.pk] and got.extended == [] and got.stopped == []
    assert "chose to stop" in AuditEvent.objects.get(action="lease.hold_warning").detail["why"]
    page = _portal(w.amy).get(reverse("frontend:job", args=["alpha", lease.job_id])).content.decode()
    assert "Warning: this job will be stopped at" in page
    assert leases_hold_check(fence=0, now=stop_time(lease)).stopped == [lease.pk]
    assert _available(w.alpha) == before


def test_leases_at_max_hours_are_not_watched(market):
    w = market
    lease = _running(w, hold_s=36000, max_s=36000)
    assert leases_hold_check(fence=0, now=lease.started_at + timedelta(hours=11)) == leases_hold_check(
        fence=0
    )
    lease.refresh_from_db()
    assert lease.state == LeaseState.RUNNING and lease.hold_warned_at is None


def test_round_tick_runs_the_hold_check(market):
    w = market
    _opt_in(w, OnHoldEnd.STOP)
    lease = _running(w, hold_s=1200, age_s=1200)
    rounds.round_tick()
    lease.refresh_from_db()
    assert lease.end_reason == EndReason.HOLD_SPENT


# The setting: API and portal.


def test_api_hold_policy(market):
    w = market
    url = "/api/v1/tenants/alpha/hold-policy"
    assert w.client(w.amy).get(url).json()["sized_by_prediction"] is False
    refused = w.client(w.amy).patch(url, {"sized_by_prediction": True}, format="json")
    assert refused.status_code == 403
    ok = w.client(w.alice).patch(url, {"sized_by_prediction": True, "on_hold_end": "stop"}, format="json")
    assert ok.status_code == 200 and ok.json()["on_hold_end"] == "stop"
    policy = HoldPolicy.objects.get(tenant=w.alpha)
    assert policy.sized_by_prediction and policy.on_hold_end == OnHoldEnd.STOP
    assert AuditEvent.objects.filter(action="tenant.hold_policy", actor=w.alice).count() == 1
    bad = w.client(w.alice).patch(url, {"on_hold_end": "pray"}, format="json")
    assert bad.status_code == 400 and "on_hold_end" in bad.json()["fields"]
    typo = w.client(w.alice).patch(url, {"sized_by_predictoin": True}, format="json")
    assert typo.status_code == 400 and "sized_by_predictoin" in typo.json()["fields"]
    assert w.client(w.bob).get(url).status_code == 404
    assert w.client(w.bob).patch(url, {"sized_by_prediction": False}, format="json").status_code == 404
    assert w.client().get(url).status_code == 401


def _portal(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_portal_hold_settings(market):
    w = market
    url = reverse("frontend:holds", args=["alpha"])
    assert "Holds are sized by max hours" in _portal(w.amy).get(url).content.decode()
    assert _portal(w.amy).post(url, {"sized_by_prediction": "on", "on_hold_end": "stop"}).status_code == 403
    bad = _portal(w.alice).post(url, {"sized_by_prediction": "on", "on_hold_end": ""})
    assert bad.status_code == 200 and "Choose what happens" in bad.content.decode()
    saved = _portal(w.alice).post(url, {"sized_by_prediction": "on", "on_hold_end": "stop"})
    assert saved.status_code == 302
    policy = HoldPolicy.objects.get(tenant=w.alpha)
    assert policy.sized_by_prediction and policy.on_hold_end == "stop"
    assert _portal(w.bob).get(url).status_code == 404
