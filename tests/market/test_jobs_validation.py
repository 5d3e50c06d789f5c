"""Bad submits: each is a 400 naming the field, and nothing is written. The service refuses the same input."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import PolicyError
from market.models import Bid, Job
from market.services.jobs import job_submit
from tests.conftest import World

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/alpha/jobs"


@pytest.fixture
def market(world: World) -> World:
    """H100: two 8-GPU nodes in domain d0 and one in d1 (largest group 16). A100: no nodes."""
    world.nodes(world.h100, 2, size=8, domain="d0")
    world.nodes(world.h100, 1, size=8, domain="d1")
    return world


def body(**change: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "train",
        "command": "python train.py",
        "gpus": 2,
        "bids": [{"gpu_type": "H100", "limit": "5"}],
        "max_hours": "2",
    }
    return {k: v for k, v in {**base, **change}.items() if v is not ...}


def h100(limit: Any) -> list[dict[str, Any]]:
    return [{"gpu_type": "H100", "limit": limit}]


BAD = [
    pytest.param({"name": ""}, "name", id="name-empty"),
    pytest.param({"name": "x" * 201}, "name", id="name-long"),
    pytest.param({"name": ...}, "name", id="name-missing"),
    pytest.param({"command": ""}, "command", id="command-empty"),
    pytest.param({"command": "   "}, "command", id="command-blank"),
    pytest.param({"command": ["python", "x.py"]}, "command", id="command-list"),
    pytest.param({"command": "x" * 8193}, "command", id="command-over-limit"),
    pytest.param({"gpus": 0}, "gpus", id="gpus-zero"),
    pytest.param({"gpus": -4}, "gpus", id="gpus-negative"),
    pytest.param({"gpus": 1.5}, "gpus", id="gpus-fraction"),
    pytest.param({"gpus": "two"}, "gpus", id="gpus-text"),
    pytest.param({"gpus": 17}, "gpus", id="gpus-over-largest-group"),
    pytest.param({"gpus": 10**30}, "gpus", id="gpus-absurd"),
    pytest.param(
        {"gpus": 1, "bids": [{"gpu_type": "A100", "limit": "3"}]}, "gpus", id="gpus-type-without-nodes"
    ),
    pytest.param({"bids": []}, "bids", id="bids-empty"),
    pytest.param({"bids": "H100"}, "bids", id="bids-not-a-list"),
    pytest.param({"bids": {"gpu_type": "H100", "limit": "5"}}, "bids", id="bids-object"),
    pytest.param({"bids": ["H100"]}, "bids[0]", id="bids-entry-not-object"),
    pytest.param({"bids": [{"gpu_type": "V100", "limit": "5"}]}, "bids[0].gpu_type", id="type-unknown"),
    pytest.param({"bids": [{"limit": "5"}]}, "bids[0].gpu_type", id="type-missing"),
    pytest.param(
        {"bids": [{"gpu_type": "H100", "limit": "5"}, {"gpu_type": "H100", "limit": "4"}]},
        "bids[1].gpu_type",
        id="type-duplicate",
    ),
    pytest.param(
        {"bids": [{"gpu_type": t, "limit": "1"} for t in ("H100", "A100", "V100")]},
        "bids",
        id="more-entries-than-types",
    ),
    pytest.param({"bids": h100("-1")}, "bids[0].limit", id="limit-negative"),
    pytest.param({"bids": h100("0")}, "bids[0].limit", id="limit-zero"),
    pytest.param({"bids": h100(-5)}, "bids[0].limit", id="limit-json-number-negative"),
    pytest.param({"bids": h100("five")}, "bids[0].limit", id="limit-text"),
    pytest.param({"bids": h100(True)}, "bids[0].limit", id="limit-bool"),
    pytest.param({"bids": h100(None)}, "bids[0].limit", id="limit-null"),
    pytest.param({"bids": h100("NaN")}, "bids[0].limit", id="limit-nan"),
    pytest.param({"bids": h100("1e30")}, "bids[0].limit", id="limit-absurd"),
    pytest.param({"bids": h100("9" * 500)}, "bids[0].limit", id="limit-500-digits"),
    pytest.param({"bids": h100("20.000001")}, "bids[0].limit", id="limit-above-max-price"),
    pytest.param({"bids": h100("4.0000001")}, "bids[0].limit", id="limit-7-decimals"),
    pytest.param({"max_hours": "0"}, "max_hours", id="hours-zero"),
    pytest.param({"max_hours": "-1"}, "max_hours", id="hours-negative"),
    pytest.param({"max_hours": "0.0166"}, "max_hours", id="hours-under-a-minute"),
    pytest.param({"max_hours": "168.0001"}, "max_hours", id="hours-over-limit"),
    pytest.param({"max_hours": 200}, "max_hours", id="hours-json-number-over-limit"),
    pytest.param({"max_hours": " 2"}, "max_hours", id="hours-space"),
    pytest.param({"max_hours": "02"}, "max_hours", id="hours-leading-zero"),
    pytest.param({"max_hours": "1.00001"}, "max_hours", id="hours-5-decimals"),
    pytest.param({"max_hours": "soon"}, "max_hours", id="hours-text"),
    pytest.param({"max_hours": "Infinity"}, "max_hours", id="hours-infinite"),
    pytest.param({"max_hours": ...}, "max_hours", id="hours-missing"),
    pytest.param({"grace_seconds": -1}, "grace_seconds", id="grace-negative"),
    pytest.param({"grace_seconds": 3601}, "grace_seconds", id="grace-over-an-hour"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_bad_submit_is_400_naming_the_field(market: World, change: dict[str, Any], field: str) -> None:
    resp = market.client(market.alice).post(URL, body(**change), format="json")
    assert resp.status_code == 400, resp.json()
    data = resp.json()
    assert data["error"] == "invalid"
    assert field in data["fields"], data
    assert data["detail"].startswith(f"{next(iter(data['fields']))}: ")
    assert (Job.objects.count(), Bid.objects.count()) == (0, 0)


def test_messages_name_the_limits(market: World) -> None:
    client = market.client(market.alice)

    def detail(**change: Any) -> str:
        return str(client.post(URL, body(**change), format="json").json()["detail"])

    assert detail(gpus=24) == "gpus: 24 GPUs exceed the largest node group of H100 (16 GPUs)"
    both = [{"gpu_type": "A100", "limit": "3"}, {"gpu_type": "H100", "limit": "5"}]
    assert (
        detail(gpus=17, bids=both) == "gpus: 17 GPUs exceed the largest node group of H100 (16 GPUs; A100: 0)"
    )
    assert detail(bids=h100("21")) == (
        "bids[0].limit: 21 credits is above the maximum price of H100 (20 credits per GPU-hour)"
    )
    assert detail(command="x" * 8193) == "command: is 8193 characters; at most 8192 are allowed"
    assert detail(max_hours="169") == "max_hours: must be at most 168 hours"
    assert detail(max_hours="0.0166") == "max_hours: must be at least 1 minute (0.0167 hours)"
    assert detail(max_hours="1.00001") == "max_hours: has more than 4 decimals"
    assert "known: A100, H100" in detail(bids=[{"gpu_type": "V100", "limit": "1"}])
    # Hours and credits are decimal strings or JSON numbers, with the same rules: too many decimals is
    # refused, not rounded (tests/test_decimal_numbers.py has the numbers' own cases).
    assert detail(max_hours=200) == "max_hours: must be at most 168 hours"
    assert detail(bids=h100(True)) == 'bids[0].limit: must be a number or a decimal string such as "12.5"'
    assert detail(bids=h100("0")) == "bids[0].limit: must be positive"
    assert detail(bids=h100("4.0000001")) == "bids[0].limit: has more decimals than a micro-credit (6)"
    assert detail(bids=h100("1e3")).startswith('bids[0].limit: must be a decimal string such as "12.5"')


def test_limits_at_the_edges_are_accepted(market: World) -> None:
    client = market.client(market.alice)
    edge = body(gpus=16, command="x" * 8192, max_hours="0.0167", grace_seconds=0, bids=h100("20"))
    resp = client.post(URL, edge, format="json")
    assert resp.status_code == 201, resp.json()
    assert (resp.json()["max_seconds"], resp.json()["max_hours"]) == (60, "0.0167")
    resp = client.post(URL, body(max_hours="168", bids=h100("0.000001")), format="json")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["max_seconds"] == 168 * 3600 and resp.json()["warnings"]


def test_down_nodes_do_not_count_and_settings_move_the_limits(market: World, settings: Any) -> None:
    from inventory.models import Node

    Node.objects.filter(topology_domain="d0").update(state=Node.State.DOWN)
    client = market.client(market.alice)
    assert client.post(URL, body(gpus=9), format="json").json()["fields"] == {
        "gpus": ["9 GPUs exceed the largest node group of H100 (8 GPUs)"]
    }
    settings.JOB_COMMAND_MAX_CHARS, settings.JOB_MAX_HOURS = 10, 2
    assert "command" in client.post(URL, body(command="x" * 11), format="json").json()["fields"]
    assert "max_hours" in client.post(URL, body(max_hours="2.5"), format="json").json()["fields"]
    assert client.post(URL, body(command="x" * 10, max_hours="2"), format="json").status_code == 201


@pytest.mark.parametrize("payload", [["name", "train"], "train", 42, None])
def test_non_object_body_is_400(market: World, payload: Any) -> None:
    resp = market.client(market.alice).post(URL, payload, format="json")
    assert resp.status_code == 400
    assert Job.objects.count() == 0


def test_form_body_is_415(market: World) -> None:
    resp = market.client(market.alice).post(URL, {"name": "train"})
    assert resp.status_code == 415
    assert Job.objects.count() == 0


@pytest.mark.parametrize("key", ["", "k" * 201, "tab\there", "caf\u00e9"])
def test_bad_idempotency_key_is_400(market: World, key: str) -> None:
    resp = market.client(market.alice).post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert resp.status_code == 400, resp.json()
    assert "Idempotency-Key" in resp.json()["fields"]
    assert Job.objects.count() == 0


# The service checks again, whatever its caller checked.


def service_submit(w: World, **change: Any) -> None:
    args: dict[str, Any] = {
        "tenant": w.alpha,
        "submitter": w.alice,
        "name": "train",
        "command": "run",
        "gpus": 1,
        "bids": [(w.h100, 5_000_000)],
        "max_seconds": 3600,
        "grace_seconds": None,
    }
    job_submit(**{**args, **change})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": " "}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"command": ""}, "command"),
        ({"command": "x" * 8193}, "command"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"gpus": 17}, "gpus"),
        ({"bids": []}, "bids"),
        ({"bids": "dup"}, "bids[1].gpu_type"),
        ({"bids": "over-max"}, "bids[0].limit"),
        ({"bids": "zero"}, "bids[0].limit"),
        ({"bids": "float"}, "bids[0].limit"),
        ({"max_seconds": 59}, "max_hours"),
        ({"max_seconds": 168 * 3600 + 1}, "max_hours"),
        ({"max_seconds": 3600.5}, "max_hours"),
        ({"grace_seconds": 3601}, "grace_seconds"),
        ({"grace_seconds": -1}, "grace_seconds"),
        ({"idempotency_key": "x" * 201}, "Idempotency-Key"),
        ({"idempotency_key": "new\nline"}, "Idempotency-Key"),
    ],
)
def test_service_refuses_bad_input(market: World, change: dict[str, Any], field: str) -> None:
    w = market
    named = {
        "dup": [(w.h100, 5_000_000), (w.h100, 4_000_000)],
        "over-max": [(w.h100, 20_000_001)],
        "zero": [(w.h100, 0)],
        "float": [(w.h100, 5.5)],
    }
    if isinstance(change.get("bids"), str):
        change = {"bids": named[change["bids"]]}
    with pytest.raises(PolicyError) as err:
        service_submit(w, **change)
    assert err.value.field == field
    assert (Job.objects.count(), Bid.objects.count()) == (0, 0)
