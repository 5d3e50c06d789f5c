"""Spend alerts API: managers write, members read, outsiders get 404; hostile bodies are 400s naming the field;
a paused team's submit is a 409 naming the rule and who lifts it."""

from __future__ import annotations

from typing import Any

import pytest

from market.models import SpendAlertRule, WebhookDelivery
from market.services.spend_alert_notify import webhook_deliver
from market.services.spend_alerts import spend_alerts_evaluate
from tests.conftest import World
from tests.market.alert_helpers import spend, webhook_receiver

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/alpha/spend-alerts"


def post(client: Any, url: str, body: Any = None, **headers: Any) -> Any:
    return client.post(url, body, format="json", **headers)


@pytest.fixture
def market(world: World, settings: Any) -> World:
    settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE = True
    world.nodes(world.h100, 1, size=8)
    world.fund(world.alpha, 1000)
    return world


def test_manager_creates_member_reads_outsider_sees_nothing(market: World) -> None:
    owner, member = market.client(market.alice), market.client(market.amy)
    body = {
        "kind": "spend_day",
        "threshold": "50",
        "action": "pause",
        "webhook_url": "https://example.org/h/tok",
    }
    made = post(owner, URL, body)
    assert made.status_code == 201, made.json()
    got = made.json()
    assert got["threshold"] == "50" and got["unit"] == "credits" and got["action"] == "pause"
    assert len(got["secret"]) >= 40 and got["webhook_url"] == "https://example.org/h/tok"
    rule_url = f"{URL}/{got['id']}"

    listed = member.get(URL).json()
    assert [r["id"] for r in listed] == [got["id"]]
    assert listed[0]["webhook"] is True and listed[0]["webhook_url"] == ""  # the URL may carry a token
    assert "secret" not in listed[0] and "secret" not in owner.get(rule_url).json()

    assert post(member, URL, body).status_code == 403
    assert member.patch(rule_url, {"threshold": "1"}, format="json").status_code == 403
    assert member.delete(rule_url).status_code == 403
    assert post(member, f"{rule_url}/lift").status_code == 403
    assert member.get(f"{rule_url}/deliveries").status_code == 403
    outsider = market.client(market.bob)
    for url in (URL, rule_url, f"{rule_url}/deliveries"):
        assert outsider.get(url).status_code == 404
    assert post(outsider, URL, body).status_code == 404
    assert market.client().get(URL).status_code == 401
    # Another team's rule id is a 404 under this team.
    beta = post(market.client(market.bob), "/api/v1/tenants/beta/spend-alerts", body).json()
    assert owner.get(f"{URL}/{beta['id']}").status_code == 404


def test_one_rule_too_many_is_a_409(market: World) -> None:
    owner = market.client(market.alice)
    for _ in range(20):
        assert post(owner, URL, {"kind": "spend_day", "threshold": "1"}).status_code == 201
    refused = post(owner, URL, {"kind": "spend_day", "threshold": "1"})
    assert refused.status_code == 409 and refused.json()["error"] == "too_many_spend_alerts"


def test_runway_threshold_is_whole_hours(market: World) -> None:
    owner = market.client(market.alice)
    made = post(owner, URL, {"kind": "runway_hours", "threshold": 48})
    assert made.status_code == 201 and made.json()["threshold"] == "48" and made.json()["unit"] == "hours"
    bad = post(owner, URL, {"kind": "runway_hours", "threshold": "1.5"})
    assert bad.status_code == 400 and "threshold" in bad.json()["fields"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "spend_day"}, "threshold"),
        ({"kind": "spend_year", "threshold": "5"}, "kind"),
        ({"kind": "spend_day", "threshold": "-5"}, "threshold"),
        ({"kind": "spend_day", "threshold": "1e400"}, "threshold"),
        ({"kind": "spend_day", "threshold": True}, "threshold"),
        ({"kind": "spend_day", "threshold": "5", "action": "cap"}, "cap"),
        ({"kind": "spend_day", "threshold": "5", "action": "cap", "cap": "1"}, "cap"),
        ({"kind": "spend_day", "threshold": "5", "webhook_url": "file:///etc/passwd"}, "webhook_url"),
        ({"kind": "spend_day", "threshold": "5", "webhook_url": "http://u:p@example.org/"}, "webhook_url"),
        ({"kind": "spend_day", "threshold": "5", "webhook_url": ["x"]}, "webhook_url"),
        ({"kind": "spend_day", "threshold": "5", "email": "sure"}, "email"),
        ({"kind": "spend_day", "threshold": "5", "secret": "mine"}, "secret"),
    ],
)
def test_hostile_bodies_are_400_naming_the_field(market: World, body: dict[str, Any], field: str) -> None:
    got = post(market.client(market.alice), URL, body)
    assert got.status_code == 400, got.json()
    assert field in got.json()["fields"]
    assert not SpendAlertRule.objects.exists()


def test_a_retried_create_with_its_key_makes_one_rule(market: World) -> None:
    owner = market.client(market.alice)
    body = {"kind": "spend_week", "threshold": "100"}
    first = post(owner, URL, body, HTTP_IDEMPOTENCY_KEY="make-weekly")
    again = post(owner, URL, body, HTTP_IDEMPOTENCY_KEY="make-weekly")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and SpendAlertRule.objects.count() == 1
    other = post(owner, URL, {**body, "threshold": "7"}, HTTP_IDEMPOTENCY_KEY="make-weekly")
    # The one idempotency rule (config/idempotency.py): a reused key is a 409 naming the header.
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["fields"]
    assert other.json()["error"] == "idempotency_key_reused"


def test_pause_then_submit_is_refused_naming_the_rule_then_lifted(market: World) -> None:
    owner, member = market.client(market.alice), market.client(market.amy)
    rule = post(owner, URL, {"kind": "spend_day", "threshold": "10", "action": "pause"}).json()
    spend(market.alpha, 20)
    spend_alerts_evaluate()
    assert member.get(f"{URL}/{rule['id']}").json()["blocked"] is True
    job = {
        "name": "t",
        "command": "run",
        "gpus": 1,
        "bids": [{"gpu_type": "H100", "limit": "5"}],
        "max_hours": 1,
    }
    refused = post(member, "/api/v1/tenants/alpha/jobs", job)
    assert refused.status_code == 409
    body = refused.json()
    assert body["error"] == "bids_paused"
    assert f"spend alert {rule['id']}" in body["detail"] and "manager" in body["detail"]
    lifted = post(owner, f"{URL}/{rule['id']}/lift")
    assert lifted.status_code == 200 and lifted.json()["blocked"] is False
    assert post(member, "/api/v1/tenants/alpha/jobs", job).status_code == 201


def test_update_delete_and_deliveries(market: World) -> None:
    owner = market.client(market.alice)
    with webhook_receiver([502]) as server:
        rule = post(owner, URL, {"kind": "spend_day", "threshold": "10", "webhook_url": server.url}).json()
        rule_url = f"{URL}/{rule['id']}"
        changed = owner.patch(rule_url, {"threshold": "12.5", "action": "cap", "cap": "30"}, format="json")
        assert changed.status_code == 200, changed.json()
        assert (changed.json()["threshold"], changed.json()["cap"]) == ("12.5", "30")
        assert changed.json()["secret"] == ""  # the URL did not change: the secret stays as it was
        assert owner.patch(rule_url, {"kind": "runway_hours"}, format="json").status_code == 400
        spend(market.alpha, 20)
        (firing_id,) = spend_alerts_evaluate()
        webhook_deliver(firing_id=firing_id)
    deliveries = owner.get(f"{rule_url}/deliveries").json()
    assert deliveries["count"] == 1
    row = deliveries["results"][0]
    assert (row["attempt"], row["status_code"], row["ok"], row["alert"]) == (1, 502, False, firing_id)
    assert owner.delete(rule_url).status_code == 204
    assert not WebhookDelivery.objects.exists()
    assert owner.get(rule_url).status_code == 404


def test_a_new_secret_only_on_rotate_or_a_first_url(market: World) -> None:
    owner = market.client(market.alice)
    rule = post(owner, URL, {"kind": "spend_day", "threshold": "10"}).json()
    rule_url = f"{URL}/{rule['id']}"
    refused = owner.patch(rule_url, {"rotate_secret": True}, format="json")
    assert refused.status_code == 400 and "rotate_secret" in refused.json()["fields"]  # no URL, no secret
    first = owner.patch(rule_url, {"webhook_url": "https://example.org/a"}, format="json").json()
    assert len(first["secret"]) >= 40  # its first URL: a secret is made
    moved = owner.patch(rule_url, {"webhook_url": "https://example.org/b"}, format="json").json()
    assert moved["secret"] == ""  # another URL keeps the secret the receiver checks with
    assert SpendAlertRule.objects.get().webhook_secret == first["secret"]
    answer = owner.patch(rule_url, {"rotate_secret": True}, format="json")
    assert answer["Cache-Control"] == "no-store"
    rotated = answer.json()
    assert len(rotated["secret"]) >= 40 and rotated["secret"] != first["secret"]
    assert SpendAlertRule.objects.get().webhook_secret == rotated["secret"]
    assert owner.patch(rule_url, {"rotate_secret": "yes"}, format="json").status_code == 400
    assert (
        market.client(market.amy).patch(rule_url, {"rotate_secret": True}, format="json").status_code == 403
    )
    assert SpendAlertRule.objects.get().webhook_secret == rotated["secret"]
