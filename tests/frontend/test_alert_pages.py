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


def _hooked_rule(team: World) -> SpendAlertRule:
    return spend_alert_create(
        actor=team.alice,
        tenant=team.alpha,
        kind="spend_day",
        threshold=10_000_000,
        webhook_url="https://example.org/hooks/tok-123",
    ).rule


EDIT = {"threshold": "12.5", "action": "cap", "cap": "30", "webhook_url": "https://example.org/hooks/tok-456"}


def test_owner_edits_a_rule_through_the_update_service_and_it_is_audited(team: World) -> None:
    from accounts.models import AuditEvent

    rule = _hooked_rule(team)
    old_secret = rule.webhook_secret
    owner = client_for(team.alice)
    page = owner.get(f"{PAGE}{rule.pk}/").content.decode()
    assert 'value="10"' in page and "tok-123" in page and "Webhook deliveries" in page
    got = owner.post(f"{PAGE}{rule.pk}/", {**EDIT, "active": "on"})
    assert got.status_code == 302 and got["Location"] == f"{PAGE}{rule.pk}/"
    rule.refresh_from_db()
    assert (rule.threshold, rule.action, rule.cap, rule.email, rule.active) == (
        12_500_000,
        "cap",
        30_000_000,
        False,  # the unticked box: email off
        True,
    )
    assert rule.webhook_url.endswith("tok-456")
    assert rule.webhook_secret == old_secret  # no rotate asked: the receiver's secret still works
    event = AuditEvent.objects.filter(action="spend_alert.update").get()
    assert event.actor_id == team.alice.pk and "tok-456" not in str(event.detail)
    assert event.detail["threshold"] == [10_000_000, 12_500_000]
    # Sent again: the rule is as it says already, so nothing more is written.
    assert owner.post(f"{PAGE}{rule.pk}/", {**EDIT, "active": "on"}).status_code == 302
    assert AuditEvent.objects.filter(action="spend_alert.update").count() == 1


def test_edit_errors_sit_beside_their_field_and_change_nothing(team: World) -> None:
    rule = _hooked_rule(team)
    owner = client_for(team.alice)
    for form, field, text in [
        ({**EDIT, "threshold": ""}, "id_threshold", "required"),
        ({**EDIT, "threshold": "abc"}, "id_threshold", ""),
        ({**EDIT, "cap": ""}, "id_cap", "required"),
        ({**EDIT, "cap": "5"}, "id_cap", "at least the threshold"),
        ({**EDIT, "action": "notify"}, "id_cap", "only for the cap action"),
        ({**EDIT, "webhook_url": "ftp://x"}, "id_webhook_url", "http"),
        ({**EDIT, "webhook_url": "", "rotate_secret": "on"}, "id_rotate_secret", "needs a webhook URL"),
    ]:
        got = owner.post(f"{PAGE}{rule.pk}/", form)
        html = got.content.decode()
        assert got.status_code == 200 and f'id="{field}-error"' in html, (form, html[:3000])
        assert text in html
    # Hostile values (as tests/security/test_portal_forms.py sends to the other forms): refused, never a 500.
    for field in ("threshold", "cap", "action", "webhook_url"):
        for raw in ("NaN", "1e999999999", "9" * 5000, "-1", "0", "[[[]]]", "1\x00", "7" * 200_000):
            got = owner.post(f"{PAGE}{rule.pk}/", {**EDIT, field: raw})
            assert got.status_code in (200, 400), (field, raw[:20], got.status_code)
    assert SpendAlertRule.objects.get().threshold == 10_000_000


def test_rotating_the_secret_shows_it_once_and_a_resent_form_rotates_once(team: World) -> None:
    from market.selectors.spend_alerts import secret_digest

    rule = _hooked_rule(team)
    owner = client_for(team.alice)
    form = {
        **EDIT,
        "email": "on",
        "active": "on",
        "rotate_secret": "on",
        "seen_secret": secret_digest(rule.webhook_secret),
    }
    got = owner.post(f"{PAGE}{rule.pk}/", form)
    rule.refresh_from_db()
    assert got.status_code == 200 and got["Cache-Control"] == "no-store"
    new = rule.webhook_secret
    assert new and new in got.content.decode()
    again = owner.post(f"{PAGE}{rule.pk}/", form)  # the same form sent twice
    rule.refresh_from_db()
    assert rule.webhook_secret == new and new not in again.content.decode()
    assert 'id="id_rotate_secret-error"' in again.content.decode()
    assert new not in owner.get(f"{PAGE}{rule.pk}/").content.decode()


def test_the_delivery_log_is_for_managers_newest_first_and_paged(team: World) -> None:
    from market.models import WebhookDelivery

    rule = _hooked_rule(team)
    spend(team.alpha, 20)
    (firing_id,) = spend_alerts_evaluate()
    for n in range(1, 26):
        WebhookDelivery.objects.create(
            firing_id=firing_id,
            attempt=n,
            url=rule.webhook_url,
            status_code=500,
            error=f"HTTP 500 attempt-{n:02d}",
            duration_ms=7,
        )
    owner = client_for(team.alice)
    first = owner.get(f"{PAGE}{rule.pk}/").content.decode()
    assert "attempt-25" in first and "attempt-06" in first and "attempt-05" not in first
    assert first.index("attempt-25") < first.index("attempt-24")  # newest first
    second = owner.get(f"{PAGE}{rule.pk}/?page=2").content.decode()
    assert "attempt-05" in second and "attempt-01" in second and "attempt-06" not in second

    member = client_for(team.amy)
    for url in (f"{PAGE}{rule.pk}/", f"{PAGE}{rule.pk}/?page=2", PAGE):
        html = member.get(url).content.decode()
        assert "tok-123" not in html and "attempt-" not in html and "Webhook deliveries" not in html
    assert "webhook" in member.get(f"{PAGE}{rule.pk}/").content.decode()  # that there is one, not where
    assert member.post(f"{PAGE}{rule.pk}/", {**EDIT, "active": "on"}).status_code == 403
    assert client_for(team.bob).get(f"{PAGE}{rule.pk}/").status_code == 404
    rule.refresh_from_db()
    assert rule.threshold == 10_000_000
