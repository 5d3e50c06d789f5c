"""Every portal and console page against every kind of viewer: anonymous, member, owner, admin, outsider."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.frontend.conftest import Market, login

pytestmark = pytest.mark.django_db


def _team_pages(m: Market) -> list[str]:
    from market.models import SpendAlertRule
    from market.services.spend_alerts import spend_alert_create

    slug, job = m.world.alpha.slug, m.winner.pk
    alert = SpendAlertRule.objects.filter(tenant=m.world.alpha).first() or (
        spend_alert_create(actor=m.world.alice, tenant=m.world.alpha, kind="spend_day", threshold=1).rule
    )
    return [
        f"/t/{slug}/",
        f"/t/{slug}/jobs/",
        f"/t/{slug}/jobs/new/",
        f"/t/{slug}/jobs/guidance/?bids-0-gpu_type=H100&bids-0-limit=3",
        f"/t/{slug}/jobs/estimate/?name=train&command=python+train.py&gpus=2&bids-0-gpu_type=H100&bids-0-limit=3",
        f"/t/{slug}/jobs/{job}/",
        f"/t/{slug}/spend/",
        f"/t/{slug}/spend.csv",
        f"/t/{slug}/tokens/",
        f"/t/{slug}/holds/",
        f"/t/{slug}/alerts/",
        f"/t/{slug}/alerts/{alert.pk}/",
    ]


def _console_pages(m: Market) -> list[str]:
    return [
        "/console/tenants/",
        f"/console/tenants/{m.world.alpha.slug}/",
        "/console/fairness/",
        "/console/market/",
        "/console/nodes/",
        "/console/rounds/",
        f"/console/rounds/{m.round.pk}/",
        "/console/audit/",
        "/console/audit.csv",
        "/console/versions/",
        "/console/versions/new/",
        "/console/canaries/new/",
        "/console/sso/",
    ]


def test_anonymous_is_sent_to_login_everywhere(market: Market) -> None:
    client = Client()
    for url in ["/", "/password/", *_team_pages(market), *_console_pages(market)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/"), url


@pytest.mark.parametrize("who", ["amy", "alice", "admin"])
def test_members_owners_and_admins_see_the_team_pages(market: Market, who: str) -> None:
    client = login(Client(), getattr(market.world, who))
    for url in _team_pages(market):
        response = client.get(url)
        assert response.status_code == 200, url


def test_an_outsider_gets_404_for_every_page_of_another_team(market: Market) -> None:
    client = login(Client(), market.world.bob)
    for url in _team_pages(market):
        assert client.get(url).status_code == 404, url
    # Writes too: nothing of alpha's can be reached through beta's own URLs either.
    job = market.winner.pk
    assert client.post(f"/t/alpha/jobs/{job}/cancel/").status_code == 404
    assert client.post(f"/t/beta/jobs/{job}/cancel/").status_code == 404
    assert client.get(f"/t/beta/jobs/{job}/").status_code == 404


def test_console_is_for_platform_admins_only(market: Market) -> None:
    for who in ("amy", "alice", "bob"):
        client = login(Client(), getattr(market.world, who))
        for url in _console_pages(market):
            assert client.get(url).status_code == 403, (who, url)
    admin = login(Client(), market.world.admin)
    for url in _console_pages(market):
        assert admin.get(url).status_code == 200, url


def test_a_member_cannot_cancel_a_job_another_member_submitted(market: Market) -> None:
    from market.models import Job

    client = login(Client(), market.world.amy)
    response = client.post(f"/t/alpha/jobs/{market.loser.pk}/cancel/", follow=True)
    assert "Only the job" in response.content.decode()
    assert Job.objects.get(pk=market.loser.pk).state == "pending"
    owner = login(Client(), market.world.alice)
    owner.post(f"/t/alpha/jobs/{market.winner.pk}/cancel/")
    assert Job.objects.get(pk=market.winner.pk).cancel_requested_at is not None


def test_a_member_sees_only_their_own_tokens_and_an_owner_sees_all(market: Market) -> None:
    from accounts.tokens import token_create

    w = market.world
    token_create(user=w.alice, tenant=w.alpha, name="alice-ci")
    mine = token_create(user=w.amy, tenant=w.alpha, name="amy-laptop")
    assert "alice-ci" not in login(Client(), w.amy).get("/t/alpha/tokens/").content.decode()
    assert "amy-laptop" in login(Client(), w.alice).get("/t/alpha/tokens/").content.decode()
    other = token_create(user=w.alice, tenant=w.alpha, name="alice-2").token
    assert login(Client(), w.amy).post(f"/t/alpha/tokens/{other.pk}/revoke/").status_code == 404
    assert login(Client(), w.amy).post(f"/t/alpha/tokens/{mine.token.pk}/revoke/").status_code == 302
