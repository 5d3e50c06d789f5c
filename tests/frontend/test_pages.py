"""What the portal's pages do: the same checks and messages as the API, explanations, allowances, the
console's forms and their audit rows, CSV exports, escaping."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from market.models import Allowance, BidOutcome, EndReason, Job, JournalEntry, Round, RoundPrice
from tests.conftest import World
from tests.frontend.conftest import Market, login, report_usage
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


def _form(**over: str) -> dict[str, str]:
    data = {
        "name": "train",
        "command": "python train.py",
        "gpus": "2",
        "max_hours": "1.5",
        "bids-0-gpu_type": "H100",
        "bids-0-limit": "3",
        "nonce": "n1",
    }
    return {**data, **over}


def test_the_submit_form_gives_the_apis_messages_beside_the_fields(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    api = world.client(world.amy, tenant=world.alpha).post(
        "/api/v1/tenants/alpha/jobs",
        {
            "name": "t",
            "command": "x",
            "gpus": 9,
            "max_hours": "0.001",
            "bids": [{"gpu_type": "H100", "limit": "99"}],
        },
        format="json",
    )
    response = login(Client(), world.amy).post(
        "/t/alpha/jobs/new/", _form(gpus="9", max_hours="0.001", **{"bids-0-limit": "99"})
    )
    assert response.status_code == 200 and not Job.objects.exists()
    html = response.content.decode()
    assert api.status_code == 400, api.json()
    for message in api.json()["fields"]["max_hours"]:
        assert f'id="id_max_hours-error">{message}' in html
    # gpus and the limit are the service's checks; the API reports them one at a time, the form too.
    assert 'id="id_max_hours"' in html and 'aria-invalid="true"' in html


def test_the_service_check_lands_beside_the_bid_limit(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    response = login(Client(), world.amy).post("/t/alpha/jobs/new/", _form(**{"bids-0-limit": "99"}))
    assert (
        'id="bids-0-limit-error">99 credits is above the maximum price of H100' in response.content.decode()
    )


def test_a_resent_submit_form_makes_one_job(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    client = login(Client(), world.amy)
    first = client.post("/t/alpha/jobs/new/", _form())
    second = client.post("/t/alpha/jobs/new/", _form())
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    job = Job.objects.get()
    assert job.max_seconds == 5400 and job.limits == [{"gpu_type": "H100", "limit": 3_000_000}]


def test_amending_above_the_maximum_shows_the_error_and_changes_nothing(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    job = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 3})
    response = login(Client(), world.amy).post(
        f"/t/alpha/jobs/{job.pk}/amend/", {"bids-0-gpu_type": "H100", "bids-0-limit": "25"}
    )
    assert response.status_code == 400
    assert 'id="bids-0-limit-error">25 credits is above the maximum price' in response.content.decode()
    assert Job.objects.get(pk=job.pk).bid_version == 1


def test_what_a_tenant_typed_is_escaped(world: World) -> None:
    make_job(world.alpha, world.amy, name="<script>alert(1)</script>")
    html = login(Client(), world.amy).get("/t/alpha/jobs/").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _outcome(job: Job, rnd: Round, world: World, **kw: object) -> BidOutcome:
    return BidOutcome.objects.create(round=rnd, job=job, bid_version=1, gpu_type=world.h100, **kw)


def test_each_reason_reads_as_one_sentence_with_its_evidence(world: World) -> None:
    from market.selectors.explain import explain_outcomes

    job = make_job(world.alpha, world.amy, gpus=2, limits={world.h100: 2.2})
    now = timezone.now()
    rounds = [Round.objects.create(slot=now - timedelta(minutes=10 - i), period_s=60) for i in range(5)]
    RoundPrice.objects.create(round=rounds[0], gpu_type=world.h100, reserve=2_000_000, posted=3_100_000,
                              spot=2_400_000, next_posted=3_100_000)  # fmt: skip
    _outcome(job, rounds[0], world, won=False, reason="outbid", figure=2_405_000)
    _outcome(job, rounds[1], world, won=False, reason="guarantee_full_below_posted", figure=3_100_000)
    _outcome(job, rounds[2], world, won=False, reason="no_node_fits", figure=1)
    _outcome(job, rounds[3], world, won=False, reason="over_budget", figure=4_400_000)
    _outcome(job, rounds[4], world, won=True, tier="S", price=2_100_000)
    tie = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 2.4})
    _outcome(tie, rounds[0], world, won=False, reason="outbid", figure=2_400_000)
    [tied] = explain_outcomes(tie, BidOutcome.objects.filter(job=tie), list(tie.bids.all()))
    assert tied.sentence == (
        "Outbid: the lowest winning H100 price was 2.40 credits per GPU-hour; bids at your limit 2.40 are served "
        "oldest first and the GPUs ran out before yours; any higher limit puts it ahead of them."
    )
    history = list(job.bids.all())
    got = [e.sentence for e in explain_outcomes(job, BidOutcome.objects.filter(job=job), history)]
    assert got == [
        "Won 2 H100 GPUs in tier S (spot) at 2.10 credits per GPU-hour.",
        "Over budget: it needed a hold of 4.40 credits (2 GPUs × the maximum hours × your limit) and the team "
        "had less available; a top-up, fewer hours or a lower limit would let it in.",
        "No node has 2 free H100 GPUs (the largest gang that could still be placed was 1); nodes are reserved "
        "for it in 2 more rounds.",
        "Guarantee full and your limit 2.20 is below the posted H100 price 3.10, with no spot GPUs left; a "
        "limit of at least 3.10 would put it in the borrowed tier.",
        "Outbid: the lowest winning H100 price was 2.40 credits per GPU-hour; a limit of 2.41 would have won 2 "
        "GPUs.",
    ]


def test_queue_position_follows_the_market_order(world: World) -> None:
    from market.selectors.explain import queue_places

    high = make_job(world.beta, world.bea, gpus=4, limits={world.h100: 5}, age_s=10)
    same_earlier = make_job(world.gamma, world.cara, gpus=2, limits={world.h100: 3}, age_s=20)
    mine = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 3, world.a100: 2}, age_s=5)
    make_job(world.alpha, world.amy, gpus=8, limits={world.h100: 1}, age_s=30)  # lower: behind
    assert high and same_earlier
    places = {p.gpu_type: (p.position, p.gpus_ahead) for p in queue_places(mine)}
    assert places == {"H100": (3, 6), "A100": (1, 0)}


def test_an_allowance_is_applied_once_per_period_and_stops_at_its_cap(world: World) -> None:
    from market.services.allowance import allowance_set, allowances_apply

    allowance_set(actor=world.admin, tenant=world.alpha, amount=60_000_000, period="day", cap=100_000_000)
    now = timezone.now()
    assert len(allowances_apply(now=now)) == 1
    assert allowances_apply(now=now + timedelta(seconds=5)) == []  # same period
    assert [e.amount for e in allowances_apply(now=now + timedelta(days=1))] == [40_000_000]  # up to the cap
    assert allowances_apply(now=now + timedelta(days=2)) == []  # at the cap: nothing, period used up
    assert (
        sum(JournalEntry.objects.filter(tenant=world.alpha).values_list("amount", flat=True)) == 100_000_000
    )
    assert Allowance.objects.get().last_period is not None


def test_console_guarantee_beyond_capacity_is_refused_beside_the_field(world: World) -> None:
    from accounts.models import AuditEvent
    from market.models import Guarantee

    world.nodes(world.h100, 1, size=8)
    client = login(Client(), world.admin)
    form = {"action": "policy", "weight": "4", "guardrail": "", "guarantee-H100": "9", "guarantee-A100": "0"}
    response = client.post("/console/tenants/alpha/", form)
    assert response.status_code == 400
    assert 'id="id_guarantee-H100-error">guarantees for H100 would total 9 GPUs but the cluster has 8' in (
        response.content.decode()
    )
    world.alpha.refresh_from_db()
    assert world.alpha.weight == 1 and not Guarantee.objects.exists()  # all or nothing
    assert client.post("/console/tenants/alpha/", {**form, "guarantee-H100": "8"}).status_code == 302
    event = AuditEvent.objects.get(action="tenant_policy.update")
    assert event.actor == world.admin and event.detail == {"weight": [1, 4], "guarantees.H100": [0, 8]}


def test_console_top_up_with_a_resent_form_moves_money_once(world: World) -> None:
    client = login(Client(), world.admin)
    form = {"action": "money", "money_kind": "topup", "amount": "12.5", "nonce": "abc"}
    client.post("/console/tenants/alpha/", form)
    client.post("/console/tenants/alpha/", form)
    assert list(JournalEntry.objects.values_list("amount", flat=True)) == [12_500_000]
    page = client.get("/console/tenants/alpha/").content.decode()
    assert 'aria-label="Credits per day: added (top-ups, allowances), charged, refunded"' in page
    bad = client.post("/console/tenants/alpha/", {**form, "amount": "1.0000001", "nonce": "x"})
    assert bad.status_code == 400 and "more decimals than a micro-credit" in bad.content.decode()


def test_market_policy_changes_are_listed_with_who_and_before_after(world: World) -> None:
    from market.selectors.policy import market_policy

    client = login(Client(), world.admin)
    page = client.get("/console/market/")
    fields = {
        "round_seconds": "120", "price_step_bp": "500", "min_runtime_s": "600", "default_grace_s": "120",
        "starve_rounds": "5", "max_reservations": "1", "max_reserved_pct": "10", "fair_reclaim": "0",
        "retention_days": "30", "energy_price_kwh": "0.25",
        "idle_util_pct": "5", "idle_seconds": "900", "reserve-H100": "2", "max-H100": "20",
        "reserve-A100": "1.2", "max-A100": "12",
    }  # fmt: skip
    assert page.status_code == 200
    assert client.post("/console/market/", fields).status_code == 302
    policy = market_policy()
    assert (policy.round_seconds, policy.energy_price_kwh, policy.idle_util_pct, policy.idle_seconds) == (
        120,
        250_000,
        5,
        900,
    )  # the energy price is typed in credits and stored in micro-credits
    html = client.get("/console/market/").content.decode()
    assert "round_seconds: 300 → 120" in html and "root" in html
    assert "idle_util_pct: 0 → 5" in html and 'name="energy_price_kwh" value="0.25"' in html
    assert policy.fair_reclaim == 0 and "fair_reclaim: 1 → 0" in html  # the admin switch for fair reclaim
    bad = client.post("/console/market/", {**fields, "price_step_bp": "0"})
    assert (
        bad.status_code == 400
        and 'id="id_price_step_bp-error">must be between 1 and 5000' in bad.content.decode()
    )
    # The service's limits, said in the form's unit; a typed amount the ledger cannot hold is refused too.
    dear = client.post("/console/market/", {**fields, "energy_price_kwh": "1000.5"}).content.decode()
    assert 'id="id_energy_price_kwh-error">must be between 0 and 1,000 credits' in dear
    odd = client.post("/console/market/", {**fields, "energy_price_kwh": "abc", "idle_seconds": "59"})
    assert odd.status_code == 400 and market_policy().idle_seconds == 900
    assert 'id="id_energy_price_kwh-error">must be a number of credits' in odd.content.decode()


def test_audit_csv_streams_the_filtered_rows(market: Market) -> None:
    client = login(Client(), market.world.admin)
    response = client.get("/console/audit.csv?action=ledger.")
    assert response.streaming
    rows = list(csv.DictReader(io.StringIO(response.getvalue().decode())))
    assert [r["action"] for r in rows] == ["ledger.topup"] and rows[0]["tenant"] == "alpha"


def test_spend_csv_has_the_rows_of_the_page_with_job_and_type(market: Market) -> None:
    from market.models import Lease
    from market.services.leases import lease_stopped

    lease = Lease.objects.get(job=market.winner)
    report_usage(lease, seconds=3600, every=600)  # its agent measured an hour on its 2 GPUs
    lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED, now=lease.started_at + timedelta(hours=1))
    client = login(Client(), market.world.amy)
    response = client.get("/t/alpha/spend.csv?gpu_type=H100")
    rows = list(csv.DictReader(io.StringIO(response.getvalue().decode())))
    assert [(r["kind"], r["job"], r["gpu_type"], r["charged"]) for r in rows] == [
        ("settle", str(market.winner.pk), "H100", "4.000000"),  # 2 GPUs x 1 h at p = 2.00 (tier B)
    ]
    # The round's hold is the team's for all its winners of the round (docs/ledger.md §Holds): it names no
    # job or type, so it is listed unfiltered, with neither.
    everything = list(csv.DictReader(io.StringIO(client.get("/t/alpha/spend.csv").getvalue().decode())))
    assert ("hold", "", "", "0.000000") in [
        (r["kind"], r["job"], r["gpu_type"], r["charged"]) for r in everything
    ]
    html = client.get("/t/alpha/spend/?gpu_type=H100").content.decode()
    assert "Spend per day by GPU type" in html and "<svg" in html


def test_a_user_in_two_teams_switches_between_them(world: World) -> None:
    from accounts.models import Membership

    Membership.objects.create(user=world.amy, tenant=world.beta, role="member")
    client = login(Client(), world.amy)
    assert client.get("/")["Location"] == "/t/alpha/"
    assert client.post("/switch/", {"tenant": "beta"})["Location"] == "/t/beta/"
    assert client.get("/t/beta/").status_code == 200
    assert client.get("/")["Location"] == "/t/beta/"  # remembered
    assert 'name="tenant"' in client.get("/t/beta/").content.decode()


def test_a_new_token_is_shown_once_and_then_only_by_its_prefix(world: World) -> None:
    from accounts.models import ApiToken

    client = login(Client(), world.amy)
    created = client.post("/t/alpha/tokens/", {"name": "laptop"}).content.decode()
    token = ApiToken.objects.get(name="laptop")
    secret = created.split('id="new-token">')[1].split("<")[0]
    assert secret.startswith(token.prefix) and len(secret) > 40
    assert secret not in client.get("/t/alpha/tokens/").content.decode()
    assert "Give the token a name" in client.post("/t/alpha/tokens/", {"name": " "}).content.decode()


def test_console_removes_a_member_and_audits_it(world: World) -> None:
    from accounts.models import AuditEvent, Membership

    client = login(Client(), world.admin)
    client.post("/console/tenants/alpha/", {"action": "member", "username": "amy", "role": "remove"})
    assert not Membership.objects.filter(user=world.amy, tenant=world.alpha).exists()
    assert AuditEvent.objects.filter(action="membership.remove", actor=world.admin).exists()
    assert login(Client(), world.amy).get("/t/alpha/").status_code == 404
    bad = client.post("/console/tenants/alpha/", {"action": "member", "username": "nobody", "role": "member"})
    assert bad.status_code == 400 and "no user called &#x27;nobody&#x27;" in bad.content.decode()


def test_password_change(world: World) -> None:
    client = login(Client(), world.amy)
    response = client.post(
        "/password/",
        {
            "old_password": "wrong",
            "new_password1": "a-new-long-pass-42",
            "new_password2": "a-new-long-pass-42",
        },
    )
    assert response.status_code == 200 and "incorrectly" in response.content.decode()
    from tests.conftest import PASSWORD

    response = client.post(
        "/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "a-new-long-pass-42",
            "new_password2": "a-new-long-pass-42",
        },
    )
    assert response.status_code == 302
    world.amy.refresh_from_db()
    assert world.amy.check_password("a-new-long-pass-42")


def test_switching_to_a_team_one_is_not_in_goes_home(world: World) -> None:
    client = login(Client(), world.amy)
    assert client.post("/switch/", {"tenant": "beta"})["Location"] == "/"
    assert client.post("/switch/", {"tenant": "not a slug!"})["Location"] == "/"
