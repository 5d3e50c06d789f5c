"""Figures as people read them (issue 37 §5): a dashboard's runway, and the console's audit details in
credits and "old → new" instead of Python reprs of micro-credits."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from accounts.audit_text import detail_fields, detail_text
from market.selectors.spend import runway_text
from market.services.policy import policy_update, tenant_policy_update
from tests.conftest import World
from tests.frontend.conftest import login


@pytest.mark.parametrize(
    ("hours", "text"),
    [
        (0.2, "about 12 minutes"),
        (5.25, "about 5.2 hours"),
        (47.9, "about 47.9 hours"),
        (72, "about 3 days"),
        (24 * 90, "about 3 months"),
        (639218.2, "more than a year"),
    ],
)
def test_runway_reads_in_the_unit_people_plan_in(hours: float, text: str) -> None:
    assert runway_text(hours) == text


def test_audit_detail_in_credits_and_changes() -> None:
    assert detail_text({"entry": 7, "amount": 12_500_000, "memo": "welcome"}, "ledger.topup") == (
        "entry: 7; amount: 12.5 credits; memo: welcome"
    )
    assert detail_text({"guardrail": [None, 5_000_000_000], "weight": [1, 3]}, "tenant_policy.update") == (
        "guardrail: none → 5,000 credits; weight: 1 → 3"
    )
    job = {"job": 3, "limits": [{"gpu_type": "H100", "limit": 2_500_000}]}
    assert detail_text(job, "job.submit") == "job: 3; limits: (gpu_type: H100, limit: 2.5 credits)"
    assert detail_text({"tenants": ["alpha", "beta"]}, "canary.start") == "tenants: alpha, beta"
    # A runway rule's threshold is hours, a spend rule's credits.
    assert detail_fields({"kind": "runway_hours", "threshold": 48}, "spend_alert.create")[1].text == "48"
    assert detail_fields({"kind": "spend_day", "threshold": 10_000_000}, "spend_alert.create")[1].text == (
        "10 credits"
    )


@pytest.mark.django_db
def test_console_audit_page_and_csv_show_credits(world: World) -> None:
    tenant_policy_update(actor=world.admin, tenant=world.alpha, guardrail=5_000_000_000)
    policy_update(actor=world.admin, min_runtime_s=120)
    client = login(Client(), world.admin)
    page = client.get("/console/audit/?action=tenant_policy.update").content.decode()
    assert "5,000 credits" in page and "5000000000" not in page and "[None" not in page
    rows = list(csv.DictReader(io.StringIO(client.get("/console/audit.csv").getvalue().decode())))
    row = next(r for r in rows if r["action"] == "tenant_policy.update")
    assert "guardrail: none → 5,000 credits" in row["detail"]
    assert '"guardrail": [null, 5000000000]' in row["detail_json"]  # as stored, for scripts
