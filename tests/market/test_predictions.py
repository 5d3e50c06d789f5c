"""Predictions from the database: measured runtimes in, predictions, costs and start estimates out; shown in
the API's job detail and the portal's estimate endpoint (docs/predictions.md)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from market.models import JobState, LeaseState
from market.selectors.job_estimate import draft_estimate, job_estimate
from market.selectors.predictions import job_runtime
from tests.conftest import PASSWORD
from tests.market.predict_helpers import finished_job, lease_for
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(world):
    return world.nodes(world.h100, 1)[0]


def _history(world, node, runtimes, **kw):
    for i, r in enumerate(runtimes):
        finished_job(world.alpha, world.alice, node, runtime_s=r, ended_ago_s=600 + i, **kw)


def test_cold_start_says_so(world, node):
    job = make_job(world.alpha, world.alice, limits={world.h100: 3})
    got = job_runtime(job=job)
    assert got.prediction is None
    assert "cold start" in got.text


def test_measured_runtimes_of_completed_jobs_only(world, node):
    _history(world, node, [3600, 7200, 10800])
    # A failed run and an expired one say nothing about how long the job needs.
    finished_job(world.alpha, world.alice, node, runtime_s=99999, state=JobState.FAILED)
    finished_job(world.alpha, world.alice, node, runtime_s=99999, state=JobState.EXPIRED)
    job = make_job(world.alpha, world.alice, limits={world.h100: 3}, name="train-8")
    got = job_runtime(job=job).prediction
    assert got is not None
    assert (got.median_s, got.basis, got.level) == (7200, 3, 0)


def test_a_lease_without_reports_counts_from_start_to_end(world, node):
    for r in (100, 200, 300):
        finished_job(world.alpha, world.alice, node, runtime_s=r, measured=False)
    got = job_runtime(job=make_job(world.alpha, world.alice, name="train-9")).prediction
    assert got is not None and got.median_s == pytest.approx(200, abs=1)


def test_other_teams_jobs_count_only_at_the_widest_level(world, node):
    for r in (50, 60, 70):
        finished_job(world.beta, world.bob, node, runtime_s=r)
    got = job_runtime(job=make_job(world.alpha, world.alice)).prediction
    assert got is not None and got.level_name == "all teams, same GPU count"


def test_preempted_job_uses_the_work_done(world, node):
    _history(world, node, [1000, 2000, 3000, 4000])
    job = make_job(world.alpha, world.alice, name="train-10")
    ended = lease_for(job, node, state=LeaseState.ENDED)
    from market.models import LeaseUsage

    LeaseUsage.objects.create(lease=ended, node=node, gpu_seconds=1500, samples=5)
    got = job_runtime(job=job)
    assert got.done_s == pytest.approx(1500)
    assert got.prediction is not None and got.prediction.basis == 3  # only the jobs that ran past 1500 s
    assert got.prediction.remaining_median_s == pytest.approx(1500)
    assert "it has run" in got.text


def test_draft_estimate_cost_and_start(world, node):
    _history(world, node, [7200] * 5)
    est = draft_estimate(
        tenant=world.alpha,
        name="train-99",
        command="python train.py",
        gpus=2,
        limits=[(world.h100, 3_000_000)],
    )
    assert est.runtime.prediction is not None
    # 2 GPUs x 2 h at the posted price (2.00, the reserve, tier B) = 8 credits.
    assert est.price == 2_000_000 and est.cost == 8_000_000
    assert "about 8.00 credits" in est.cost_text
    (start,) = est.starts
    assert start.at is not None and "Next round" in start.text and "8 GPUs free" in start.text


def test_start_waits_for_predicted_ends_of_running_jobs(world, node):
    _history(world, node, [3600] * 5, gpus=8)
    running = make_job(world.beta, world.bob, gpus=8, name="train-1")
    running.state = JobState.RUNNING
    running.save()
    lease = lease_for(running, node, ran_s=600)
    from market.models import LeaseGpu

    LeaseGpu.objects.bulk_create(LeaseGpu(lease=lease, gpu=g) for g in node.gpus.all())
    ahead = make_job(world.gamma, world.carl, gpus=4, limits={world.h100: 5}, age_s=60)
    est = draft_estimate(tenant=world.alpha, name="x", command="y", gpus=4, limits=[(world.h100, 2_500_000)])
    (start,) = est.starts
    assert ahead.pk and start.at is not None
    assert "1 bid (4 GPUs) ahead" in start.text and "predicted ends" in start.text
    # The lease ran 10 min of a predicted 60: it ends in about 50, and the start is the round after that.
    wait = (start.at - timezone.now()).total_seconds()
    assert 50 * 60 - 5 <= wait <= 55 * 60 + 5, start.text


def test_below_reserve_never_starts(world, node):
    est = draft_estimate(tenant=world.alpha, name="x", command="y", gpus=1, limits=[(world.h100, 1_000_000)])
    assert est.starts[0].at is None and "below the reserve" in est.starts[0].text


def test_api_job_detail_has_the_estimate(world, node):
    _history(world, node, [3600, 3600, 7200])
    job = make_job(world.alpha, world.alice, limits={world.h100: 3}, name="train-11")
    body = world.client(world.amy).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()
    est = body["estimate"]
    assert est["prediction"]["median_seconds"] == 3600 and est["prediction"]["basis_jobs"] == 3
    assert est["prediction"]["match"] == "same team, same job name, same GPU count"
    assert est["starts"][0]["gpu_type"] == "H100" and est["starts"][0]["text"]
    assert "ran 60 min" in est["prediction_text"]
    # An ended job has no estimate; an outsider sees nothing.
    done = finished_job(world.alpha, world.alice, node, runtime_s=10)
    assert world.client(world.amy).get(f"/api/v1/tenants/alpha/jobs/{done.pk}").json()["estimate"] is None
    assert world.client(world.bob).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").status_code == 404


def _portal(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_portal_estimate_endpoint(world, node):
    _history(world, node, [7200] * 4)
    url = reverse("frontend:estimate", args=["alpha"])
    params = {"name": "train-12", "command": "python train.py", "gpus": "1", "bids-0-gpu_type": "H100",
              "bids-0-limit": "2.4"}  # fmt: skip
    body = _portal(world.amy).get(url, params).json()
    assert body["prediction"]["basis_jobs"] == 4
    assert body["prediction_text"].startswith("Jobs like this ran 2.0 h (median of 4 jobs")
    # Limit 2.40 above the posted 2.00: borrowed, at the posted price; 1 GPU x 2 h.
    assert "At 2.00 credits per GPU-hour (H100: the posted price" in body["cost_text"]
    assert "about 4.00 credits" in body["cost_text"] and "your limit of 2.40 caps it" in body["cost_text"]
    assert body["starts"][0]["gpu_type"] == "H100"
    # Half-typed input is no error; bad numbers are a 400 naming the field; outsiders get 404.
    assert _portal(world.amy).get(url, {**params, "bids-0-limit": "2."}).status_code == 200
    bad = _portal(world.amy).get(url, {**params, "gpus": "lots"})
    assert bad.status_code == 400 and "gpus" in bad.json()["errors"]
    assert _portal(world.amy).get(url, {**params, "gpus": "0"}).status_code == 400
    assert _portal(world.bob).get(url, params).status_code == 404


def test_job_page_shows_prediction(world, node):
    _history(world, node, [7200] * 3)
    job = make_job(world.alpha, world.alice, limits={world.h100: 3}, name="train-13")
    page = _portal(world.amy).get(reverse("frontend:job", args=["alpha", job.pk])).content.decode()
    assert "Jobs like this ran 2.0 h" in page and "Estimated start" in page


def test_job_estimate_running_job_uses_its_lease_price(world, node):
    _history(world, node, [7200] * 3)
    job = make_job(world.alpha, world.alice, limits={world.h100: 3}, name="train-14")
    job.state = JobState.RUNNING
    job.save()
    lease_for(job, node, price=3_000_000, ran_s=3600)
    est = job_estimate(job=job)
    assert est.price == 3_000_000 and est.starts == []
    assert est.runtime.done_s == pytest.approx(3600, abs=5)
