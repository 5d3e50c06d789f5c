"""The portal's spend alerts: owners create and lift, members read and see why their bid is refused; the form's
errors sit beside their field; the webhook secret is shown once."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from market.models import SpendAlertRule
from market.services.spend_alerts import spend_alert_create, spend_alerts_evaluate
from tests.conftest import World
from tests.market.alert_helpers import spend

pytestmark = pytest.mark.django_db

PAGE = "/t/alpha/alerts/"


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def team(world: World, settings: Any) -> World:
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    return world


def test_owner_creates_a_rule_with_a_webhook_and_sees_the_secret_once(team: World) -> None:
    owner = client_for(team.alice)
    got = owner.post(
        PAGE,
        {
            "kind": "spend_day",
            "threshold": "50",
            "action": "pause",
            "webhook_url": "https://example.org/h",
            "email": "on",
        },
    )
    assert got.status_code == 200 and got["Cache-Control"] == "no-store"
    rule = SpendAlertRule.objects.get()
    assert rule.action == "pause" and rule.email and rule.threshold == 50_000_000
    assert rule.webhook_secret in got.content.decode()
    assert rule.webhook_secret not in owner.get(PAGE).content.decode()


def test_form_errors_sit_beside_their_field(team: World) -> None:
    owner = client_for(team.alice)
    for form, field, text in [
        ({"kind": "spend_day", "threshold": "abc"}, "id_threshold", ""),
        ({"kind": "spend_day", "threshold": "5", "action": "cap"}, "id_cap", "required"),
        ({"kind": "spend_day", "threshold": "5", "webhook_url": "ftp://x"}, "id_webhook_url", "http"),
        ({"kind": "runway_hours", "threshold": "2.5"}, "id_threshold", "whole number of hours"),
    ]:
        html = owner.post(PAGE, form).content.decode()
        assert f'id="{field}-error"' in html, (form, html[:3000])
        assert text in html
    assert not SpendAlertRule.objects.exists()


def test_member_reads_but_cannot_write_and_sees_the_pause(team: World) -> None:
    rule = spend_alert_create(
        actor=team.alice, tenant=team.alpha, kind="spend_day", threshold=10_000_000, action="pause"
    ).rule
    spend(team.alpha, 20)
    spend_alerts_evaluate()
    member = client_for(team.amy)
    html = member.get(PAGE).content.decode()
    assert "spend per day above 10 credits" in html and "bids paused" in html
    assert "Create rule" not in html and "Lift" not in html
    assert member.post(PAGE, {"kind": "spend_day", "threshold": "5"}).status_code == 403
    assert member.post(f"{PAGE}{rule.pk}/lift/").status_code == 403
    assert member.post(f"{PAGE}{rule.pk}/delete/").status_code == 403
    dashboard = member.get("/t/alpha/").content.decode()
    assert f"Spend alert {rule.pk}" in dashboard and "new bids are paused" in dashboard
    assert (
        "until an owner of the team lifts it" in dashboard and "Lift it on the Alerts page" not in dashboard
    )
    submit_page = member.get("/t/alpha/jobs/new/").content.decode()
    assert "New bids are paused by spend alert" in submit_page
    refused = member.post(
        "/t/alpha/jobs/new/",
        {
            "name": "t",
            "command": "run",
            "gpus": "1",
            "max_hours": "1",
            "bids-0-gpu_type": "H100",
            "bids-0-limit": "5",
            "nonce": "n1",
        },
    )
    assert refused.status_code == 200 and "New bids are paused by spend alert" in refused.content.decode()
    # Outsiders see no such page.
    assert client_for(team.bob).get(PAGE).status_code == 404
    assert client_for(team.bob).post(f"{PAGE}{rule.pk}/lift/").status_code == 404

    owner = client_for(team.alice)
    assert owner.post(f"{PAGE}{rule.pk}/lift/").status_code == 302
    rule.refresh_from_db()
    assert rule.blocked_since is None
    assert "New bids are paused" not in member.get("/t/alpha/jobs/new/").content.decode()
    assert owner.post(f"{PAGE}{rule.pk}/delete/").status_code == 302
    assert not SpendAlertRule.objects.exists()


def test_a_paused_amend_says_why_on_the_job_page(team: World) -> None:
    from tests.market.round_helpers import make_job

    job = make_job(team.alpha, team.amy, gpus=1, limits={team.h100: 3})
    spend_alert_create(actor=team.alice, tenant=team.alpha, kind="spend_week", threshold=1, action="pause")
    spend(team.alpha, 1)
    spend_alerts_evaluate()
    got = client_for(team.amy).post(
        f"/t/alpha/jobs/{job.pk}/amend/", {"bids-0-gpu_type": "H100", "bids-0-limit": "4"}
    )
    assert got.status_code == 400
    assert "New bids are paused by spend alert" in got.content.decode()
    job.refresh_from_db()
    assert job.bid_version == 1


def test_a_cap_is_said_on_the_submit_it_refuses(team: World) -> None:
    spend_alert_create(
        actor=team.alice,
        tenant=team.alpha,
        kind="spend_day",
        threshold=5_000_000,
        action="cap",
        cap=10_000_000,
    )
    spend(team.alpha, 6)
    spend_alerts_evaluate()
    member = client_for(team.amy)
    assert "New bids are" not in member.get("/t/alpha/jobs/new/").content.decode()  # it depends on the bid
    form = {"name": "t", "command": "run", "gpus": "1", "bids-0-gpu_type": "H100", "bids-0-limit": "3"}
    small = member.post("/t/alpha/jobs/new/", {**form, "max_hours": "1", "nonce": "a"})
    assert small.status_code == 302  # 3 more: 9, within 10
    big = member.post("/t/alpha/jobs/new/", {**form, "max_hours": "2", "nonce": "b"})
    assert "New bids are capped by spend alert" in big.content.decode()
    assert "cap of 10 credits" in big.content.decode()
