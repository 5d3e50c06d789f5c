"""The estimate-before-submit and spend endpoints the command line reads (market/api/estimate.py, spend.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from market.models import Job
from tests.conftest import World

pytestmark = pytest.mark.django_db

ESTIMATE = "/api/v1/tenants/alpha/jobs/estimate"
SPEND = "/api/v1/tenants/alpha/spend"


def body(**change: Any) -> dict[str, Any]:
    return {
        "name": "train",
        "command": "python train.py",
        "gpus": 2,
        "max_hours": "1",
        "bids": [{"gpu_type": "H100", "limit": "5"}, {"gpu_type": "A100", "limit": "1"}],
        **change,
    }


def test_estimate_gives_the_portals_guidance_per_entry_and_writes_nothing(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    resp = world.client(world.amy).post(ESTIMATE, body(), format="json")
    assert resp.status_code == 200, resp.json()
    data = resp.json()
    assert [(g["gpu_type"], g["limit"]) for g in data["guidance"]] == [
        ("H100", 5_000_000),
        ("A100", 1_000_000),
    ]
    assert data["guidance"][0]["tier"] == "B" and "posted price" in data["guidance"][0]["advice"]
    assert data["guidance"][1]["tier"] is None and "Below the reserve" in data["guidance"][1]["advice"]
    assert data["prediction"] is None and data["warning"] == ""  # cold start: no similar finished jobs
    assert {s["gpu_type"] for s in data["starts"]} == {"H100", "A100"}
    assert not Job.objects.exists()


def test_estimate_refuses_a_bad_field_by_name_like_submit(world: World) -> None:
    client = world.client(world.amy)
    resp = client.post(ESTIMATE, body(max_hours="0"), format="json")
    assert resp.status_code == 400 and resp.json()["detail"].startswith("max_hours:")
    resp = client.post(ESTIMATE, body(bids=[{"gpu_type": "B200", "limit": "5"}]), format="json")
    assert resp.status_code == 400 and "bids[0].gpu_type" in resp.json()["fields"]


def test_estimate_and_spend_are_behind_the_tenant_wall(world: World) -> None:
    outsider, anonymous = world.client(world.bob), world.client()
    assert outsider.post(ESTIMATE, body(), format="json").status_code == 404
    assert outsider.get(SPEND).status_code == 404
    assert anonymous.post(ESTIMATE, body(), format="json").status_code == 401
    assert anonymous.get(SPEND).status_code == 401


def test_spend_sums_charges_per_day_and_type(world: World) -> None:
    from market.models import EndReason, Lease
    from market.services.leases import lease_stopped
    from market.services.rounds import round_tick
    from tests.frontend.conftest import report_usage
    from tests.market.round_helpers import make_job

    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 3}, name="winner")
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched"
    lease = Lease.objects.get(job=job)
    report_usage(lease, seconds=3600, every=600)
    lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED, now=lease.started_at + timedelta(hours=1))
    lease.refresh_from_db()
    data = world.client(world.amy).get(SPEND, {"days": 7}).json()
    today = timezone.now().date().isoformat()
    assert [(d["day"], d["gpu_type"], d["charged"]) for d in data["days"]] == [(today, "H100", lease.charged)]
    assert data["total"] == lease.charged == 4_000_000  # 2 GPUs x 1 h at the posted 2.00
    assert data["total_credits"] == "4"
    assert data["since"] == (timezone.now().date() - timedelta(days=6)).isoformat()


def test_spend_refuses_days_out_of_range(world: World) -> None:
    resp = world.client(world.amy).get(SPEND, {"days": 0})
    assert resp.status_code == 400 and "days" in resp.json()["fields"]


def test_estimate_warns_when_max_hours_is_below_what_similar_jobs_needed(world: World) -> None:
    from tests.market.predict_helpers import finished_job

    (node,) = world.nodes(world.h100, 1, size=8)
    for i, hours in enumerate((2, 2.5, 3, 3.5)):
        finished_job(world.alpha, world.amy, node, runtime_s=hours * 3600, name="train", command="python train.py", gpus=2, ended_ago_s=600 + i)  # fmt: skip
    client = world.client(world.amy)
    short = client.post(ESTIMATE, body(max_hours="0.5"), format="json").json()
    assert short["prediction"]["basis_jobs"] == 4 and short["cost"] is not None
    assert short["warning"].startswith("Max hours 0.5 is less than the ") and "stopped" in short["warning"]
    assert client.post(ESTIMATE, body(max_hours="8"), format="json").json()["warning"] == ""


def test_the_list_and_the_detail_say_where_a_job_runs_and_why_one_waits(world: World) -> None:
    from market.services.rounds import round_tick
    from tests.market.round_helpers import make_job

    (node,) = world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    winner = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 3}, name="winner")
    low = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 1}, name="low")  # below the reserve 2
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched"
    client = world.client(world.amy)
    rows = {j["name"]: j for j in client.get("/api/v1/tenants/alpha/jobs").json()["results"]}
    assert (rows["winner"]["tier"], rows["winner"]["node"], rows["winner"]["reason"]) == ("B", node.name, "")
    assert rows["low"]["tier"] is None and rows["low"]["node"] is None
    assert rows["low"]["reason"].startswith("Your limit 1.00 is below the H100 reserve price 2.00")
    detail = client.get(f"/api/v1/tenants/alpha/jobs/{low.pk}").json()
    assert detail["reason"] == rows["low"]["reason"]
    assert detail["queue"] == [{"gpu_type": "H100", "limit": 1_000_000, "position": 1, "gpus_ahead": 0}]
    shown = client.get(f"/api/v1/tenants/alpha/jobs/{winner.pk}").json()
    assert shown["queue"] == [] and shown["reason"].startswith("Won 2 H100 GPUs in tier B")
    assert shown["leases"][0]["exit_code"] is None  # running: no exit yet
