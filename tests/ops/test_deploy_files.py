"""The dashboard and alert rules in deploy/ name only series the platform exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from market.services.rounds import round_tick
from tests.conftest import World
from tests.market.round_helpers import make_job

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _named_in_deploy() -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "gpumarket.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs.append((DEPLOY / "prometheus" / "gpumarket-alerts.yml").read_text())
    return {m for e in exprs for m in re.findall(r"\bgpumarket_[a-z_]+", e)}


@pytest.mark.django_db
def test_every_series_in_the_dashboard_and_alerts_is_exported(world: World, settings) -> None:
    settings.METRICS_TOKEN = "deploy-files-token"
    world.nodes(world.h100, 1, size=4)
    world.fund(world.alpha, 10)
    make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 3})
    round_tick()
    from config import metrics

    metrics.usage_reports("ingested", node="n", samples=1)
    metrics.agent_command("fetched", kind="bind", node="n", command_id=1, lease_id=1)
    metrics.celery_task(task="market.round_tick", outcome="success")
    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer deploy-files-token").content.decode()
    # Families are listed (HELP, TYPE) even while they have no sample, e.g. no pending job just now.
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
    exported = {
        f.name + suffix for f in text_string_to_metric_families(body) for suffix in suffixes.get(f.type, [""])
    }
    missing = _named_in_deploy() - exported
    assert not missing, sorted(missing)
