"""Spend alerts end to end in chromium: an owner creates a pausing rule with a webhook in the portal, spend
crosses it, the dashboard says so, a member's submit is refused with the reason, the webhook reaches a real
local HTTP server (a 500 first, then delivered) and the owner sees the deliveries and lifts the pause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import login, shot
from tests.conftest import World
from tests.market.alert_helpers import spend, webhook_receiver

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_owner_pauses_bids_on_spend_member_is_told_owner_lifts(
    world: World, live_server: Any, browser: Any, tmp_path: Path, settings: Any
) -> None:
    from django.core import mail

    from accounts.models import AuditEvent
    from market.models import Job, SpendAlertRule
    from market.services.spend_alert_notify import firing_email
    from market.services.spend_alerts import spend_alerts_evaluate
    from market.tasks import spend_alert_webhook

    settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on 127.0.0.1
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 500)
    owner = browser.new_context().new_page()
    member = browser.new_context().new_page()
    for p in (owner, member):
        p.set_default_timeout(15_000)

    with webhook_receiver([500, 200]) as server:
        login(owner, live_server.url, "alice")
        owner.click("header >> text=Alerts")
        owner.select_option("#id_kind", "spend_day")
        owner.fill("#id_threshold", "50")
        owner.select_option("#id_action", "pause")
        owner.fill("#id_webhook_url", "ftp://example.org/hook")
        owner.click("form button:has-text('Create rule')")
        assert "http" in owner.locator("#id_webhook_url-error").inner_text()  # beside its field
        owner.fill("#id_webhook_url", server.url)
        owner.click("form button:has-text('Create rule')")
        secret = owner.locator("#webhook-secret").inner_text()
        rule = SpendAlertRule.objects.get()
        assert secret == rule.webhook_secret and rule.action == "pause"
        shot(owner, tmp_path, "alerts-created")

        # Spend crosses the rule; beat's evaluation fires it, a worker mails and posts it.
        spend(world.alpha, 30)
        spend(world.alpha, 35)
        (firing_id,) = spend_alerts_evaluate()
        assert firing_email(firing_id=firing_id)
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == 2  # the 500, then the 200
    assert [m.to for m in mail.outbox] == [["alice@ex.org"]]
    assert all(server.signature_ok(secret, got) for got in server.received) and len(server.received) == 2

    login(member, live_server.url, "amy")
    notice = member.locator("[data-field=spend-alert-notice]")
    assert "spend per day above 50 credits" in notice.inner_text()
    assert "65 credits spent this day" in notice.inner_text()
    assert "new bids are paused until an owner of the team lifts it" in notice.inner_text()
    assert "Lift it" not in notice.inner_text()  # a member cannot: the notice says who can
    shot(member, tmp_path, "alerts-dashboard-paused", docs=True)

    member.click("header >> text=Submit")
    assert f"paused by spend alert {rule.pk}" in member.locator("[data-field=bids-paused]").inner_text()
    member.fill("#id_name", "blocked run")
    member.fill("#id_command", "python train.py")
    member.select_option("#bids-0-gpu_type", "H100")
    member.fill("#bids-0-limit", "3")
    member.click("form button:has-text('Submit job')")
    refused = member.locator("form .error[role=alert]").inner_text()
    assert f"New bids are paused by spend alert {rule.pk} (spend per day above 50 credits)" in refused
    assert "owner of the team (the manager role) or a platform admin can lift it" in refused
    assert not Job.objects.filter(name="blocked run").exists()
    shot(member, tmp_path, "alerts-submit-refused", docs=True)

    owner.goto(f"{live_server.url}/t/alpha/alerts/")
    assert "bids paused since" in owner.locator(f"tr[data-rule='{rule.pk}']").inner_text()
    deliveries = owner.locator("section", has_text="Webhook deliveries").inner_text()
    assert "200 delivered" in deliveries and "HTTP 500" in deliveries
    shot(owner, tmp_path, "alerts-owner", docs=True)
    owner.click(f"button[aria-label='Lift spend alert {rule.pk}']")
    owner.wait_for_selector(f"text=Spend alert {rule.pk} lifted")
    assert AuditEvent.objects.filter(action="spend_alert.lift", actor=world.alice).count() == 1

    member.click("form button:has-text('Submit job')")  # the same form, sent again
    member.wait_for_selector("h1:has-text('blocked run')")
    assert Job.objects.filter(name="blocked run").count() == 1


def test_owner_edits_a_rule_rotates_its_secret_and_reads_its_delivery_log(
    world: World, live_server: Any, browser: Any, tmp_path: Path, settings: Any
) -> None:
    from accounts.models import AuditEvent
    from market.models import SpendAlertRule
    from market.services.spend_alerts import spend_alert_create, spend_alerts_evaluate
    from market.tasks import spend_alert_webhook

    settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on 127.0.0.1
    world.fund(world.alpha, 500)
    with webhook_receiver([503, 200]) as server:
        rule = spend_alert_create(
            actor=world.alice,
            tenant=world.alpha,
            kind="spend_day",
            threshold=50_000_000,
            webhook_url=server.url,
        ).rule
        spend(world.alpha, 60)
        (firing_id,) = spend_alerts_evaluate()
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == 2  # the 503, then the 200

    owner = browser.new_context().new_page()
    owner.set_default_timeout(15_000)
    login(owner, live_server.url, "alice")
    owner.click("header >> text=Alerts")
    owner.click(f"a[aria-label='Edit spend alert {rule.pk} and see its deliveries']")
    log = owner.locator("#deliveries").inner_text()
    assert "HTTP 503" in log and "200 delivered" in log
    assert log.index("200 delivered") < log.index("HTTP 503")  # newest first

    owner.select_option("#id_action", "cap")
    owner.fill("#id_threshold", "40")
    owner.click("form#edit-rule button:has-text('Save')")
    assert "required" in owner.locator("#id_cap-error").inner_text()  # beside its field
    owner.fill("#id_cap", "80")
    owner.check("#id_rotate_secret")
    owner.click("form#edit-rule button:has-text('Save')")
    secret = owner.locator("#webhook-secret").inner_text()
    rule = SpendAlertRule.objects.get()
    assert secret == rule.webhook_secret and (rule.threshold, rule.cap) == (40_000_000, 80_000_000)
    assert AuditEvent.objects.filter(action="spend_alert.update", actor=world.alice).count() == 1
    shot(owner, tmp_path, "alerts-rule-edit", docs=True)

    member = browser.new_context().new_page()
    member.set_default_timeout(15_000)
    login(member, live_server.url, "amy")
    member.goto(f"{live_server.url}/t/alpha/alerts/{rule.pk}/")
    body = member.locator("main").inner_text()
    assert "Spend per day above 40 credits" in body
    assert "127.0.0.1" not in body and "Webhook deliveries" not in body and "Save" not in body
