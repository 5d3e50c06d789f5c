"""Speed-aware guidance from the database: measured runtimes per GPU type in, per-type speeds, runtimes, costs
and same-work limits out, in the API's job estimate and the portal's estimate endpoint
(market/selectors/speed.py; docs/predictions.md §Speed per GPU type)."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from market.models import EndReason, LeaseState
from market.selectors.job_estimate import draft_estimate
from market.selectors.predictions import finished_sample, single_types
from tests.market.predict_helpers import finished_job, lease_for
from tests.market.round_helpers import make_job
from tests.market.test_predictions import _portal

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(world):
    cache.clear()  # the finished-jobs sample is cached for a minute
    return world.nodes(world.h100, 1)[0], world.nodes(world.a100, 1, prefix="a")[0]


def _runs(world, node, runtimes, name="train-7"):
    for i, r in enumerate(runtimes):
        finished_job(world.alpha, world.alice, node, runtime_s=r, name=name, ended_ago_s=600 + i, gpus=2)


def _rows(est):
    assert est.speeds is not None
    return {r.gpu_type: r for r in est.speeds.rows}


def test_speeds_runtimes_costs_and_same_work_limits(world, nodes):
    h100, a100 = nodes
    _runs(world, a100, [7000, 7200, 7400, 7200])
    _runs(world, h100, [3500, 3600, 3700, 3600])
    est = draft_estimate(
        tenant=world.alpha,
        name="train-8",
        command="python train.py",
        gpus=2,
        limits=[(world.a100, 2_400_000)],
    )
    rows = _rows(est)
    assert est.speeds is not None
    assert est.speeds.reference == "A100" and est.speeds.reference_limit == 2_400_000
    assert rows["A100"].factor.factor == 1.0 and rows["A100"].suggested_limit == 2_400_000
    h = rows["H100"]
    assert h.factor.factor == pytest.approx(2.0)
    assert (h.factor.runs, h.factor.reference_runs, h.factor.level) == (4, 4, 0)
    # Every run counted in A100 time (H100 runs doubled): median 7200 s; on H100 half of it.
    assert est.speeds.reference_median_s == pytest.approx(7200)
    assert h.runtime_s == pytest.approx(3600) and rows["A100"].runtime_s == pytest.approx(7200)
    # 2 GPUs x 1 h x the posted price 2.00 on H100; 2 x 2 h x 1.20 on A100.
    assert h.cost == 4_000_000 and rows["A100"].cost == 4_800_000
    # Twice the work per hour: twice the limit for the same cost per unit of work.
    assert (h.suggested_limit, h.limit_clipped) == (4_800_000, None)
    assert "2.00x the speed of A100 (from 4 runs on H100 and 4 on A100" in h.text
    assert "bid 4.80" in h.text
    # The cost line prices the A100 the bid would win at A100's own pace, not the pooled runtime of every type
    # (about 1.5 h, half of it H100 runs): 2 GPUs x 2 h x the posted 1.20.
    assert est.runtime.prediction is not None and est.runtime.prediction.median_s < 7000
    assert est.cost == 4_800_000 and "at A100's speed it runs about 2.0 h" in est.cost_text


def test_same_work_limit_clipped_to_the_reserve(world, nodes):
    h100, a100 = nodes
    _runs(world, a100, [7200] * 3)
    _runs(world, h100, [3600] * 3)
    est = draft_estimate(
        tenant=world.alpha, name="train-8", command="x", gpus=2, limits=[(world.h100, 2_000_000)]
    )
    a = _rows(est)["A100"]
    # Half the speed: 1.00 per GPU-hour would pay the same per unit of work, below A100's reserve 1.20.
    assert a.factor.factor == pytest.approx(0.5)
    assert (a.suggested_limit, a.limit_clipped) == (1_200_000, "reserve")
    assert "bid its reserve 1.20 (the same-work limit is below it)" in a.text


def test_cold_start_is_said(world, nodes):
    h100, _ = nodes
    _runs(world, h100, [3600] * 5)  # only ever ran on H100: nothing to compare A100 with
    est = draft_estimate(
        tenant=world.alpha, name="train-8", command="x", gpus=2, limits=[(world.h100, 2_000_000)]
    )
    a = _rows(est)["A100"]
    assert a.factor.factor is None and a.runtime_s is None and a.suggested_limit is None
    assert a.text.startswith("Cold start: too few similar jobs have run on both A100 and H100")
    assert _rows(est)["H100"].runtime_s == pytest.approx(3600)
    empty = draft_estimate(tenant=world.beta, name="n", command="c", gpus=1, limits=[(world.a100, 2_000_000)])
    assert empty.speeds is not None and "cold start" in empty.speeds.text
    assert all(r.factor.factor is None for r in empty.speeds.rows if r.gpu_type != "A100")


def test_a_job_that_ran_on_two_types_says_nothing_about_either(world, nodes):
    h100, a100 = nodes
    job = finished_job(world.alpha, world.alice, h100, runtime_s=100, gpus=2)
    second = lease_for(job, a100, state=LeaseState.ENDED)
    second.ended_at, second.end_reason = job.ended_at, EndReason.COMPLETED
    second.save()
    (sample,) = finished_sample(world.alpha.pk)
    assert sample.gpu_type == ""
    assert single_types([(1, "H100"), (1, "H100"), (2, "H100"), (2, "A100")]) == {1: "H100"}


def test_api_job_estimate_has_speeds(world, nodes):
    h100, a100 = nodes
    _runs(world, a100, [7200] * 3)
    _runs(world, h100, [2400] * 3)
    job = make_job(world.alpha, world.alice, gpus=2, limits={world.a100: 2}, name="train-11")
    est = world.client(world.amy).get(f"/api/v1/tenants/alpha/jobs/{job.pk}").json()["estimate"]
    assert est["prediction"] is not None and est["cost_text"]  # the fields before stay
    speeds = est["speeds"]
    assert speeds["reference"] == "A100" and speeds["reference_limit"] == 2_000_000
    h = {t["gpu_type"]: t for t in speeds["types"]}["H100"]
    assert h["speed_factor"] == pytest.approx(3.0) and h["confidence"] in {"high", "medium", "low"}
    assert h["speed_low"] <= 3.0 <= h["speed_high"]
    assert (h["basis_runs"], h["reference_runs"]) == (3, 3)
    assert h["match"] == "same team, same job name, same GPU count" and h["via"] is None
    assert h["runtime_seconds"] == pytest.approx(2400) and h["posted_price"] == 2_000_000
    assert h["runtime_p90_seconds"] == pytest.approx(2400)
    assert h["cost"] == 2_666_667 and h["suggested_limit"] == 6_000_000 and h["limit_clipped"] is None


def test_portal_estimate_shows_the_table(world, nodes):
    h100, a100 = nodes
    _runs(world, a100, [7200] * 3)
    _runs(world, h100, [3600] * 3)
    got = _portal(world.amy).get(
        "/t/alpha/jobs/estimate/",
        {"name": "train-9", "command": "x", "gpus": "2", "bids-0-gpu_type": "H100", "bids-0-limit": "3"},
    )
    assert got.status_code == 200
    speeds = got.json()["speeds"]
    rows = {r["gpu_type"]: r for r in speeds["rows"]}
    assert speeds["reference"] == "H100"
    assert rows["A100"]["speed"] == "0.50x" and rows["A100"]["runtime"] == "2.0 h"
    assert rows["A100"]["limit"] == "1.50" and rows["H100"]["basis"] == "reference"
    assert rows["A100"]["basis"].startswith("3 runs here, 3 on H100;")


def test_job_page_shows_the_table(world, nodes):
    h100, a100 = nodes
    _runs(world, a100, [7200] * 3)
    _runs(world, h100, [3600] * 3)
    job = make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 3}, name="train-12")
    page = _portal(world.amy).get(f"/t/alpha/jobs/{job.pk}/").content.decode()
    assert 'data-field="speeds"' in page and "Per GPU type (speeds against H100)" in page
    assert '<tr data-type="A100"' in page and ">0.50x<" in page and ">1.50<" in page
    # An ended job has no estimate, so no table.
    done = finished_job(world.alpha, world.alice, h100, runtime_s=10)
    assert 'data-field="speeds"' not in _portal(world.amy).get(f"/t/alpha/jobs/{done.pk}/").content.decode()
