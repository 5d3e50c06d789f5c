"""Prices and rounds API over Round and RoundPrice rows made here (the round engine has its own tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.models import GpuType
from market.models import Round, RoundPrice, RoundState
from tests.conftest import World

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ENDPOINTS = ["/api/v1/prices", "/api/v1/prices/history", "/api/v1/rounds"]


def make_round(minute: int, state: str = RoundState.DISPATCHED, **fields: Any) -> Round:
    slot = T0 + timedelta(minutes=minute)
    return Round.objects.create(slot=slot, period_s=60, state=state, **fields)


def price(
    rnd: Round, gpu_type: GpuType, posted: int, spot: int | None = None, nxt: int | None = None
) -> RoundPrice:
    return RoundPrice.objects.create(
        round=rnd,
        gpu_type=gpu_type,
        reserve=gpu_type.reserve_price,
        posted=posted,
        spot=spot,
        next_posted=nxt if nxt is not None else posted,
    )


@pytest.mark.parametrize("url", [*ENDPOINTS, "/api/v1/rounds/1"])
def test_anyone_signed_in_reads_anonymous_gets_401(world: World, url: str) -> None:
    make_round(0, id=1)
    for user in (world.amy, world.bob, world.alice, world.admin):
        assert world.client(user).get(url).status_code == 200, (url, user)
    resp = world.client().get(url)
    assert resp.status_code == 401 and resp.json()["error"] == "not_authenticated"


# Prices now


def test_price_board_before_any_round(world: World) -> None:
    rows = world.client(world.amy).get("/api/v1/prices").json()
    assert rows == [
        {
            "gpu_type": "A100",
            "reserve": 1_200_000,
            "reserve_credits": "1.2",
            "posted": 1_200_000,
            "posted_credits": "1.2",
            "max": 12_000_000,
            "max_credits": "12",
            "spot": None,
            "spot_credits": None,
            "last_round": None,
            "last_round_at": None,
        },
        {
            "gpu_type": "H100",
            "reserve": 2_000_000,
            "reserve_credits": "2",
            "posted": 2_000_000,
            "posted_credits": "2",
            "max": 20_000_000,
            "max_credits": "20",
            "spot": None,
            "spot_credits": None,
            "last_round": None,
            "last_round_at": None,
        },
    ]


def test_price_board_shows_current_posted_and_the_last_rounds_spot(world: World) -> None:
    old, new = make_round(0), make_round(1)
    price(old, world.h100, 2_000_000, spot=2_500_000)
    price(new, world.h100, 2_100_000, spot=None, nxt=2_205_000)
    price(old, world.a100, 1_200_000, spot=1_300_000)
    GpuType.objects.filter(pk=world.h100.pk).update(posted_price=2_205_000)
    GpuType.objects.filter(pk=world.a100.pk).update(posted_price=99_000_000)  # above max: clamped
    client = world.client(world.amy)
    client.get("/api/v1/prices")  # the token's first use writes last_used_at
    with CaptureQueriesContext(connection) as queries:
        rows = {r["gpu_type"]: r for r in client.get("/api/v1/prices").json()}
    h100, a100 = rows["H100"], rows["A100"]
    assert (h100["posted"], h100["posted_credits"], h100["spot"], h100["last_round"]) == (
        2_205_000,
        "2.205",
        None,  # the newest round had no spot winner
        new.pk,
    )
    assert datetime.fromisoformat(h100["last_round_at"]) == new.slot
    assert (a100["posted"], a100["spot"], a100["spot_credits"], a100["last_round"]) == (
        12_000_000,
        1_300_000,
        "1.3",
        old.pk,
    )
    board = [q["sql"] for q in queries.captured_queries if '"market_' in q["sql"]]
    assert len(board) == 2, board  # the types with their newest price's id, then those prices with rounds


# Price history


def history(world: World, **params: Any) -> Any:
    return world.client(world.amy).get("/api/v1/prices/history", params)


def test_history_newest_first_with_round_and_time(world: World) -> None:
    r1, r2 = make_round(0), make_round(1)
    price(r1, world.h100, 2_000_000, spot=2_400_000, nxt=2_100_000)
    price(r2, world.h100, 2_100_000, nxt=2_205_000)
    price(r2, world.a100, 1_200_000, spot=1_250_000)
    body = history(world).json()
    assert body["count"] == 3
    assert [(r["round"], r["gpu_type"]) for r in body["results"]] == [
        (r2.pk, "A100"),
        (r2.pk, "H100"),
        (r1.pk, "H100"),
    ]
    last = body["results"][-1]
    assert {
        k: last[k]
        for k in ("reserve", "posted", "spot", "spot_credits", "next_posted", "next_posted_credits")
    } == {
        "reserve": 2_000_000,
        "posted": 2_000_000,
        "spot": 2_400_000,
        "spot_credits": "2.4",
        "next_posted": 2_100_000,
        "next_posted_credits": "2.1",
    }
    assert datetime.fromisoformat(last["round_at"]) == r1.slot
    assert body["results"][1]["spot"] is None and body["results"][1]["spot_credits"] is None


def test_history_filters_by_type_and_dates_and_pages(world: World) -> None:
    rounds = [make_round(m) for m in range(5)]
    for r in rounds:
        price(r, world.h100, 2_000_000)
        price(r, world.a100, 1_200_000)
    body = history(world, gpu_type="H100").json()
    assert body["count"] == 5 and {r["gpu_type"] for r in body["results"]} == {"H100"}
    body = history(world, gpu_type="H100", since="2026-03-01T12:01:00Z", until="2026-03-01T12:03:00Z").json()
    assert [r["round"] for r in body["results"]] == [rounds[3].pk, rounds[2].pk, rounds[1].pk]
    assert history(world, since="2026-03-02").json()["count"] == 0
    assert history(world, until="2026-03-01").json()["count"] == 10  # a bare date means through that day
    assert history(world, until="2026-02-28").json()["count"] == 0
    page = history(world, page_size=4, page=3).json()
    assert page["count"] == 10 and len(page["results"]) == 2 and page["next"] is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"gpu_type": "TPU"}, "gpu_type"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "until"),
    ],
)
def test_history_bad_parameter_is_400_naming_it(world: World, params: dict[str, str], field: str) -> None:
    resp = history(world, **params)
    assert resp.status_code == 400
    assert field in resp.json()["fields"]


# Rounds


def test_rounds_newest_first_with_figures_and_prices(world: World) -> None:
    old = make_round(0)
    new = make_round(
        1,
        bids=7,
        winners=4,
        losers=3,
        preemptions=1,
        skipped=1,
        gpus_free=16,
        gpus_allocated=12,
        counters={"guarantee_unrestorable": 1},
        clear_ms=35,
        commit_ms=12,
        digest="ab" * 32,
        attempts=2,
        frozen_at=T0,
        cleared_at=T0,
        committed_at=T0,
        dispatched_at=T0,
        book=b"x" * 1000,
    )
    price(new, world.h100, 2_000_000, spot=2_600_000, nxt=2_100_000)
    price(new, world.a100, 1_200_000)
    body = world.client(world.amy).get("/api/v1/rounds").json()
    assert [r["id"] for r in body["results"]] == [new.pk, old.pk]
    got = body["results"][0]
    assert {
        k: got[k] for k in ("state", "period_s", "bids", "winners", "losers", "preemptions", "skipped")
    } == {
        "state": "dispatched",
        "period_s": 60,
        "bids": 7,
        "winners": 4,
        "losers": 3,
        "preemptions": 1,
        "skipped": 1,
    }
    assert (got["gpus_free"], got["gpus_allocated"], got["clear_ms"], got["commit_ms"]) == (16, 12, 35, 12)
    assert (got["counters"], got["digest"], got["attempts"], got["error"]) == (
        {"guarantee_unrestorable": 1},
        "ab" * 32,
        2,
        "",
    )
    assert {"slot", "created_at", "frozen_at", "cleared_at", "committed_at", "dispatched_at"} <= set(got)
    assert "book" not in got
    assert [(p["gpu_type"], p["spot"], p["next_posted_credits"]) for p in got["prices"]] == [
        ("A100", None, "1.2"),
        ("H100", 2_600_000, "2.1"),
    ]
    assert body["results"][1]["prices"] == [] and body["results"][1]["cleared_at"] is None


def test_rounds_filter_by_state_and_page(world: World) -> None:
    for m in range(4):
        make_round(m)
    failed = make_round(4, state=RoundState.FAILED, error="clearing timed out")
    client = world.client(world.amy)
    rows = client.get("/api/v1/rounds", {"state": "failed"}).json()["results"]
    assert [(r["id"], r["error"]) for r in rows] == [(failed.pk, "clearing timed out")]
    assert client.get("/api/v1/rounds", {"state": "open"}).json()["count"] == 0
    page = client.get("/api/v1/rounds", {"page_size": 2, "page": 2}).json()
    assert page["count"] == 5 and len(page["results"]) == 2 and page["next"] and page["previous"]


def test_rounds_bad_state_is_400(world: World) -> None:
    resp = world.client(world.amy).get("/api/v1/rounds", {"state": "done"})
    assert resp.status_code == 400 and "state" in resp.json()["fields"]


def test_one_round_and_unknown_round_is_json_404(world: World) -> None:
    rnd = make_round(0, state=RoundState.COMMITTED)
    price(rnd, world.h100, 2_000_000, spot=2_200_000)
    client = world.client(world.bob)
    body = client.get(f"/api/v1/rounds/{rnd.pk}").json()
    assert (body["id"], body["state"], [p["gpu_type"] for p in body["prices"]]) == (
        rnd.pk,
        "committed",
        ["H100"],
    )
    for url in (f"/api/v1/rounds/{rnd.pk + 1}", "/api/v1/rounds/abc"):
        resp = client.get(url)
        assert resp.status_code == 404 and resp.json()["error"] == "not_found", url


def test_round_list_queries_do_not_grow_with_rounds(world: World) -> None:
    client = world.client(world.amy)
    client.get("/api/v1/rounds")  # the token's first use writes last_used_at
    for m in range(3):
        price(make_round(m), world.h100, 2_000_000)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/rounds")
    for m in range(3, 10):
        price(make_round(m), world.a100, 1_200_000)
    with CaptureQueriesContext(connection) as many:
        client.get("/api/v1/rounds")
    assert len(many) == len(few)
