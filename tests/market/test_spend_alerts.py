"""Spend alerts' services: a crossing fires once per rule and period, mails the managers, posts a signed webhook
to a real local server (retried, each attempt logged), and a pausing or capping rule refuses new bids with the
reason until a manager lifts it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import mail

from accounts.models import AuditEvent
from config.errors import PolicyError
from market.models import AlertAction, AlertKind, JobState, SpendAlertFiring, SpendAlertRule, WebhookDelivery
from market.services import spend_alert_notify as notify
from market.services import spend_alerts as alerts
from market.services.jobs import BidsCapped, BidsPaused, bid_amend, job_submit
from market.tasks import spend_alert_webhook
from tests.conftest import World
from tests.market.alert_helpers import spend, webhook_receiver

C = 1_000_000  # one credit in micro-credits


@pytest.fixture
def market(world: World, settings: Any) -> World:
    settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on 127.0.0.1
    world.nodes(world.h100, 2, size=8)
    world.fund(world.alpha, 1000)
    return world


def rule(w: World, **change: Any) -> SpendAlertRule:
    args: dict[str, Any] = {
        "actor": w.alice,
        "tenant": w.alpha,
        "kind": AlertKind.SPEND_DAY,
        "threshold": 50 * C,
    }
    return alerts.spend_alert_create(**{**args, **change}).rule


def submit(w: World, user: Any = None, **change: Any) -> Any:
    args: dict[str, Any] = {
        "tenant": w.alpha,
        "submitter": user or w.amy,
        "name": "train",
        "command": "run",
        "gpus": 2,
        "bids": [(w.h100, 5 * C)],
        "max_seconds": 3600,
        "grace_seconds": None,
    }
    return job_submit(**{**args, **change})[0]


@pytest.mark.django_db
def test_a_crossing_fires_once_per_period_and_mails_the_managers(market: World) -> None:
    r = rule(market)
    spend(market.alpha, 40)
    assert alerts.spend_alerts_evaluate() == []  # 40 is not above 50
    spend(market.alpha, 20)
    fired = alerts.spend_alerts_evaluate()
    assert len(fired) == 1
    assert alerts.spend_alerts_evaluate() == []  # the same day: once
    firing = SpendAlertFiring.objects.get(pk=fired[0])
    assert (firing.rule_id, firing.value, firing.threshold) == (r.pk, 60 * C, 50 * C)

    assert notify.firing_email(firing_id=firing.pk)
    assert not notify.firing_email(firing_id=firing.pk)  # a repeated task mails nothing
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["alice@ex.org"]  # the managers, not the members
    assert "spend per day above 50 credits" in sent.subject
    assert "60 credits spent this day" in sent.body and "this is a notice" in sent.body
    assert AuditEvent.objects.filter(action="spend_alert.fire", tenant=market.alpha).count() == 1

    # The next day is a new period: it fires again once the day's own spend crosses.
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    assert alerts.spend_alerts_evaluate(now=tomorrow) == []  # nothing spent on that day yet


@pytest.mark.django_db
def test_a_weekly_rule_and_a_runway_rule(market: World) -> None:
    week = rule(market, kind=AlertKind.SPEND_WEEK, threshold=10 * C)
    runway = rule(market, kind=AlertKind.RUNWAY, threshold=24 * 365)
    assert alerts.spend_alerts_evaluate() == []  # nothing spent, nothing burning
    spend(market.alpha, 70)  # 70 a week is 10 a day: 930 credits last 2232 hours
    fired = SpendAlertFiring.objects.filter(pk__in=alerts.spend_alerts_evaluate())
    assert {f.rule_id: f.value for f in fired} == {week.pk: 70 * C, runway.pk: 2232}


@pytest.mark.django_db
def test_pause_refuses_new_bids_with_the_reason_until_a_manager_lifts_it(market: World) -> None:
    pending = submit(market)
    r = rule(market, action=AlertAction.PAUSE)
    spend(market.alpha, 60)
    alerts.spend_alerts_evaluate()
    r.refresh_from_db()
    assert r.blocked_since is not None
    with pytest.raises(BidsPaused) as refused:
        submit(market)
    message = str(refused.value)
    assert f"spend alert {r.pk}" in message and "spend per day above 50 credits" in message
    assert "manager" in message and "lift" in message
    with pytest.raises(BidsPaused):  # an amend is a new bid too
        bid_amend(job=pending, actor=market.amy, bids=[(market.h100, 6 * C)])
    pending.refresh_from_db()
    assert pending.state == JobState.PENDING  # what exists is not touched

    with pytest.raises(alerts.NotPermitted):
        alerts.spend_alert_lift(actor=market.amy, rule=r)  # a member cannot
    with pytest.raises(alerts.NotPermitted):
        alerts.spend_alert_lift(actor=market.bob, rule=r)  # nor another team's owner
    alerts.spend_alert_lift(actor=market.alice, rule=r)
    assert AuditEvent.objects.filter(action="spend_alert.lift", actor=market.alice).exists()
    submit(market)
    # Lifted for the rest of the period: the rule has fired for it.
    alerts.spend_alerts_evaluate()
    r.refresh_from_db()
    assert r.blocked_since is None


@pytest.mark.django_db
def test_a_cap_refuses_only_a_bid_that_could_pass_it(market: World) -> None:
    r = rule(market, action=AlertAction.CAP, threshold=50 * C, cap=80 * C)
    spend(market.alpha, 60)
    alerts.spend_alerts_evaluate()
    submit(market, gpus=2, bids=[(market.h100, 5 * C)])  # 10 more: 70, within 80
    with pytest.raises(BidsCapped) as refused:
        submit(market, gpus=4, bids=[(market.h100, 5 * C)], max_seconds=3 * 3600)  # 60 more
    assert f"spend alert {r.pk}" in str(refused.value) and "cap of 80 credits" in str(refused.value)
    alerts.spend_alert_lift(actor=market.admin, rule=r)  # a platform admin may lift too
    submit(market, gpus=4, bids=[(market.h100, 5 * C)], max_seconds=3 * 3600)


@pytest.mark.django_db
def test_a_cap_counts_pending_bids_so_splitting_does_not_pass_it(market: World) -> None:
    rule(market, action=AlertAction.CAP, threshold=50 * C, cap=80 * C)
    spend(market.alpha, 60)
    alerts.spend_alerts_evaluate()
    first = submit(market, gpus=1, bids=[(market.h100, 10 * C)])  # 10: 70
    second = submit(market, gpus=1, bids=[(market.h100, 10 * C)])  # 10: 80, at the cap
    with pytest.raises(BidsCapped):
        submit(market, gpus=1, bids=[(market.h100, 5 * C)])  # 5 more: 85
    # An amend replaces its job's bid: only the difference counts.
    bid_amend(job=first, actor=market.amy, bids=[(market.h100, 9 * C)])  # 79
    with pytest.raises(BidsCapped):
        bid_amend(job=second, actor=market.amy, bids=[(market.h100, 12 * C)])  # 81


@pytest.mark.django_db
def test_only_managers_write_rules(market: World) -> None:
    for outsider in (market.amy, market.bob):
        with pytest.raises(alerts.NotPermitted):
            rule(market, actor=outsider)
    r = rule(market)
    with pytest.raises(alerts.NotPermitted):
        alerts.spend_alert_update(actor=market.amy, rule=r, changes={"threshold": 1})
    with pytest.raises(alerts.NotPermitted):
        alerts.spend_alert_delete(actor=market.amy, rule=r)
    assert SpendAlertRule.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "spend_month"}, "kind"),
        ({"threshold": 0}, "threshold"),
        ({"threshold": -5}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"threshold": "50"}, "threshold"),
        ({"threshold": 10**16}, "threshold"),
        ({"kind": AlertKind.RUNWAY, "threshold": 10**6}, "threshold"),
        ({"action": "explode"}, "action"),
        ({"action": AlertAction.CAP}, "cap"),
        ({"action": AlertAction.CAP, "cap": 10 * C}, "cap"),  # below the threshold
        ({"action": AlertAction.CAP, "kind": AlertKind.RUNWAY, "threshold": 5, "cap": 9 * C}, "action"),
        ({"cap": 90 * C}, "cap"),  # a cap without the cap action
        ({"email": "yes"}, "email"),
        ({"webhook_url": "ftp://example.org/x"}, "webhook_url"),
        ({"webhook_url": "javascript:alert(1)"}, "webhook_url"),
        ({"webhook_url": "https://user:pw@example.org/x"}, "webhook_url"),
        ({"webhook_url": "https://"}, "webhook_url"),
        ({"webhook_url": "https://example.org:99999/"}, "webhook_url"),
        ({"webhook_url": "https://example.org/a b"}, "webhook_url"),
        ({"webhook_url": "https://example.org/" + "a" * 500}, "webhook_url"),
        ({"webhook_url": 5}, "webhook_url"),
    ],
)
@pytest.mark.django_db
def test_hostile_rules_name_the_field(market: World, change: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as refused:
        rule(market, **change)
    assert refused.value.field == field
    assert not SpendAlertRule.objects.exists()


@pytest.mark.django_db
def test_private_webhook_addresses_are_refused_unless_allowed(market: World, settings: Any) -> None:
    settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://127.0.0.1:8000/x", "http://10.0.0.5/x", "http://[::1]/x", "http://169.254.169.254/"):
        with pytest.raises(PolicyError) as refused:
            rule(market, webhook_url=url)
        assert refused.value.field == "webhook_url"
    # A name is checked when it is delivered to: localhost resolves to loopback, so nothing is sent.
    r = rule(market, webhook_url="http://localhost:1/x")
    spend(market.alpha, 60)
    (firing_id,) = alerts.spend_alerts_evaluate()
    done = notify.webhook_deliver(firing_id=firing_id)
    assert (done.attempt, done.retry) == (1, False)
    (delivery,) = WebhookDelivery.objects.filter(firing__rule=r)
    assert "non-public address" in delivery.error and delivery.status_code is None


@pytest.mark.django_db
def test_too_many_rules(market: World) -> None:
    for _ in range(alerts.MAX_RULES_PER_TENANT):
        rule(market)
    with pytest.raises(alerts.TooManyRules):
        rule(market)


@pytest.mark.django_db
def test_a_retried_create_makes_one_rule(market: World) -> None:
    first = alerts.spend_alert_create(
        actor=market.alice,
        tenant=market.alpha,
        kind=AlertKind.SPEND_DAY,
        threshold=C,
        webhook_url="https://example.org/x",
        client_key="k1",
        request_digest="d1",
    )
    again = alerts.spend_alert_create(
        actor=market.alice,
        tenant=market.alpha,
        kind=AlertKind.SPEND_DAY,
        threshold=C,
        webhook_url="https://example.org/x",
        client_key="k1",
        request_digest="d1",
    )
    assert first.created and not again.created and again.rule.pk == first.rule.pk
    assert again.secret == first.secret and len(first.secret) >= 40
    with pytest.raises(PolicyError) as refused:
        alerts.spend_alert_create(
            actor=market.alice,
            tenant=market.alpha,
            kind=AlertKind.SPEND_DAY,
            threshold=2 * C,
            client_key="k1",
            request_digest="d2",
        )
    assert refused.value.field == "Idempotency-Key"


@pytest.mark.django_db
def test_update_checks_the_whole_rule_and_unblocks_when_it_stops_blocking(market: World) -> None:
    r = rule(market, action=AlertAction.PAUSE)
    spend(market.alpha, 60)
    alerts.spend_alerts_evaluate()
    with pytest.raises(PolicyError) as refused:
        alerts.spend_alert_update(actor=market.alice, rule=r, changes={"action": AlertAction.CAP})
    assert refused.value.field == "cap"
    with pytest.raises(PolicyError) as refused:
        alerts.spend_alert_update(actor=market.alice, rule=r, changes={"kind": AlertKind.RUNWAY})
    assert refused.value.field == "kind"
    alerts.spend_alert_update(actor=market.alice, rule=r, changes={"action": AlertAction.NOTIFY})
    r.refresh_from_db()
    assert r.blocked_since is None and r.action == AlertAction.NOTIFY
    submit(market)
    changed = alerts.spend_alert_update(
        actor=market.alice, rule=r, changes={"webhook_url": "https://example.org/secret-token"}
    )
    assert changed.secret  # a new URL gets a new secret, shown once
    event = AuditEvent.objects.filter(action="spend_alert.update").first()
    assert event is not None and "secret-token" not in str(event.detail)


@pytest.mark.django_db
def test_webhook_is_signed_and_a_500_is_retried_with_a_delivery_row_each(market: World) -> None:
    with webhook_receiver([500, 200]) as server:
        created = alerts.spend_alert_create(
            actor=market.alice,
            tenant=market.alpha,
            kind=AlertKind.SPEND_DAY,
            threshold=50 * C,
            action=AlertAction.PAUSE,
            webhook_url=server.url,
        )
        spend(market.alpha, 60)
        (firing_id,) = alerts.spend_alerts_evaluate()
        # The task as a worker runs it: the 500 makes it retry (eagerly here), the 200 ends it.
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == 2
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == 0  # delivered: nothing more is sent
    assert len(server.received) == 2
    for got in server.received:
        assert server.signature_ok(created.secret, got)
        assert got.headers["X-Gpumarket-Alert"] == str(firing_id)
        assert got.headers["Content-Type"] == "application/json"
    assert not server.signature_ok("another secret", server.received[0])
    body = server.json(1)
    assert body["tenant"] == "alpha" and body["rule"]["action"] == "pause" and body["value"] == 60 * C
    rows = list(WebhookDelivery.objects.filter(firing_id=firing_id).order_by("attempt"))
    assert [(d.attempt, d.status_code, d.ok) for d in rows] == [(1, 500, False), (2, 200, True)]
    assert "500" in rows[0].error and rows[1].url == server.url
    assert SpendAlertFiring.objects.get(pk=firing_id).delivered_at is not None


@pytest.mark.django_db
def test_webhook_gives_up_after_five_attempts(market: World) -> None:
    with webhook_receiver([503]) as server:
        rule(market, webhook_url=server.url)
        spend(market.alpha, 60)
        (firing_id,) = alerts.spend_alerts_evaluate()
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == notify.WEBHOOK_ATTEMPTS
        assert spend_alert_webhook.apply(args=(firing_id,)).get() == 0
    assert len(server.received) == notify.WEBHOOK_ATTEMPTS
    assert WebhookDelivery.objects.filter(firing_id=firing_id, ok=False).count() == notify.WEBHOOK_ATTEMPTS
    assert [notify.webhook_backoff(n) for n in (1, 2, 3, 4)] == [30, 120, 480, 1920]


@pytest.mark.django_db
def test_an_unreachable_webhook_is_logged_with_its_error(market: World) -> None:
    rule(market, webhook_url="http://127.0.0.1:9/nothing-listens")
    spend(market.alpha, 60)
    (firing_id,) = alerts.spend_alerts_evaluate()
    done = notify.webhook_deliver(firing_id=firing_id)
    assert done.retry
    delivery = WebhookDelivery.objects.get(firing_id=firing_id)
    assert delivery.status_code is None and delivery.error


@pytest.mark.django_db(transaction=True)
def test_two_workers_evaluating_at_once_fire_once(market: World) -> None:
    from tests.concurrency import run_together

    rule(market)
    spend(market.alpha, 60)
    results = run_together(lambda _: alerts.spend_alerts_evaluate(), 4)
    assert not any(isinstance(r, Exception) for r in results), results
    assert sum(len(r) for r in results) == 1
    assert SpendAlertFiring.objects.count() == 1


@pytest.mark.django_db
def test_the_tick_queues_new_firings_and_sweeps_lost_ones(market: World, monkeypatch: Any) -> None:
    from market import tasks

    queued: list[tuple[str, int]] = []
    monkeypatch.setattr(tasks.spend_alert_email, "delay", lambda i: queued.append(("email", i)))
    monkeypatch.setattr(tasks.spend_alert_webhook, "delay", lambda i: queued.append(("webhook", i)))
    rule(market, webhook_url="https://example.org/h")
    spend(market.alpha, 60)
    assert tasks.spend_alerts_tick() == 1
    (firing,) = SpendAlertFiring.objects.all()
    assert queued == [("email", firing.pk), ("webhook", firing.pk)]
    # Its worker stopped before it queued anything: a later tick finds it (not before two minutes).
    assert notify.firings_unnotified() == []
    later = firing.fired_at + timedelta(minutes=5)
    assert notify.firings_unnotified(now=later) == [firing.pk]
    notify.firing_email(firing_id=firing.pk)
    assert notify.firings_unnotified(now=later) == [firing.pk]  # the webhook is still owed
    WebhookDelivery.objects.create(firing=firing, attempt=1, url="https://example.org/h", status_code=502)
    assert notify.firings_unnotified(now=later) == []  # in the hands of its retries
    assert notify.firings_unnotified(now=firing.fired_at + timedelta(days=2)) == []


@pytest.mark.django_db
def test_notifying_a_deleted_rule_does_nothing(market: World) -> None:
    r = rule(market, webhook_url="https://example.org/h")
    spend(market.alpha, 60)
    (firing_id,) = alerts.spend_alerts_evaluate()
    alerts.spend_alert_delete(actor=market.alice, rule=r)
    assert not notify.firing_email(firing_id=firing_id)
    assert notify.webhook_deliver(firing_id=firing_id).attempt == 0
    assert mail.outbox == []
