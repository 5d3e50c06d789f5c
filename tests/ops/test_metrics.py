"""/metrics: access control, and the market series with live values after a round."""

from __future__ import annotations

import re
from typing import TypedDict, Unpack

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from market.models import Guarantee, Round
from market.services.rounds import round_tick
from tests.conftest import World
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


class Headers(TypedDict, total=False):
    HTTP_AUTHORIZATION: str


def scrape(client: Client | None = None, **headers: Unpack[Headers]) -> str:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return response.content.decode()


def test_refused_without_token_or_allowed_address(settings) -> None:
    settings.METRICS_TOKEN = "s3cret-metrics-token"
    settings.METRICS_ALLOW_FROM = []
    assert Client().get("/metrics").status_code == 403
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token").status_code == 200


def test_allow_list_by_client_address(settings) -> None:
    from ipaddress import ip_network

    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOW_FROM = [ip_network("10.1.0.0/16")]
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.2.0.1").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="not-an-ip").get("/metrics").status_code == 403


def test_market_series_after_a_round(world: World, settings) -> None:
    settings.METRICS_TOKEN = "t0ken-for-scrape"
    world.nodes(world.h100, 2, size=4)
    world.fund(world.alpha, 100)
    world.fund(world.beta, 100)
    Guarantee.objects.create(tenant=world.alpha, gpu_type=world.h100, gpus=2)
    make_job(world.alpha, world.alice, gpus=2, limits={world.h100: 3})
    make_job(world.beta, world.bob, gpus=4, limits={world.h100: 3, world.a100: 2})
    make_job(world.beta, world.bob, gpus=8, limits={world.h100: 3, world.a100: 2})  # too big: stays pending
    rnd = round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error

    s = samples(scrape(HTTP_AUTHORIZATION="Bearer t0ken-for-scrape"))
    assert s["gpumarket_rounds_total", (("outcome", "committed"),)] == 1
    assert s["gpumarket_rounds_total", (("outcome", "failed"),)] == 0
    assert s["gpumarket_round_duration_seconds_count", ()] == 1
    assert s["gpumarket_round_commit_seconds_bucket", (("le", "+Inf"),)] == 1
    assert s["gpumarket_gpus", (("gpu_type", "H100"), ("state", "busy"))] == 6
    assert s["gpumarket_gpus", (("gpu_type", "H100"), ("state", "free"))] == 2
    assert s["gpumarket_pending_gpus", (("gpu_type", "H100"),)] == 8
    assert s["gpumarket_pending_jobs", (("gpu_type", "A100"),)] == 1
    assert s["gpumarket_tenant_gpus", (("gpu_type", "H100"), ("tenant", "alpha"), ("tier", "G"))] == 2
    assert s["gpumarket_tenant_guarantee_gpus", (("gpu_type", "H100"), ("tenant", "alpha"))] == 2
    assert s["gpumarket_tenant_guarantee_compliance_ratio", (("gpu_type", "H100"), ("tenant", "alpha"))] == 1
    assert s["gpumarket_price_posted_credits_per_gpu_hour", (("gpu_type", "H100"),)] > 0
    assert s["gpumarket_price_reserve_credits_per_gpu_hour", (("gpu_type", "H100"),)] == 2
    assert s["gpumarket_ledger_balance_credits", (("kind", "available"),)] > 0
    assert s["gpumarket_ledger_balance_credits", (("kind", "held"),)] > 0
    dispatched = Round.objects.get().dispatched_at
    assert dispatched is not None
    assert s["gpumarket_round_last_committed_timestamp_seconds", ()] == dispatched.timestamp()


def test_requests_counted_by_route_name_never_by_path(world: World, settings) -> None:
    settings.METRICS_TOKEN = "tok-tok-tok-tok"
    client = world.client(world.alice)
    for _ in range(3):
        assert client.get("/api/v1/tenants/alpha/jobs").status_code == 200
    assert client.get("/api/v1/tenants/beta/jobs").status_code == 404
    body = scrape(HTTP_AUTHORIZATION="Bearer tok-tok-tok-tok")
    s = samples(body)
    key = (("method", "GET"), ("route", "job-list"), ("status", "200"))
    assert s["gpumarket_http_requests_total", key] >= 3
    assert s["gpumarket_http_request_duration_seconds_count", (("method", "GET"), ("route", "job-list"))] >= 4
    assert "alpha" not in re.findall(r'route="([^"]*)"', body)
    assert not any("/api/" in route for route in re.findall(r'route="([^"]*)"', body))


def test_agent_usage_and_command_series() -> None:
    from config import metrics

    before = metrics.USAGE_REPORTS.labels("refused")._value.get()
    metrics.usage_reports("refused", node="n1", reports=2)
    metrics.usage_reports("ingested", node="n1", reports=1, samples=8)
    metrics.agent_command("acked", kind="bind", node="n1", command_id=1, lease_id=2)
    assert metrics.USAGE_REPORTS.labels("refused")._value.get() == before + 2
    with pytest.raises(ValueError):
        metrics.usage_reports("lost", node="n1")


def test_a_failing_query_leaves_its_group_out_and_says_so(settings, monkeypatch) -> None:
    from django.db import OperationalError

    from ops import selectors

    def broken() -> None:
        raise OperationalError("connection lost")

    settings.METRICS_TOKEN = "t0ken-for-broken"
    monkeypatch.setattr(selectors, "ledger_totals", broken)
    body = scrape(HTTP_AUTHORIZATION="Bearer t0ken-for-broken")
    s = samples(body)
    assert s["gpumarket_scrape_errors", (("group", "ledger"),)] == 1
    assert "gpumarket_ledger_balance_credits" not in body
    assert ("gpumarket_rounds_total", (("outcome", "committed"),)) in s
