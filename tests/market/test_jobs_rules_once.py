"""Job rules live in the service (market/services/jobs.py); the API's serializer calls them and the portal's
form goes through the serializer, so the same bad input gets the same message at both doors and from the
service itself (issue 26 §4)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from config.errors import PolicyError
from market.models import Job
from market.services.jobs import job_submit
from tests.conftest import World
from tests.frontend.conftest import login

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/alpha/jobs"
API_BODY: dict[str, Any] = {
    "name": "train",
    "command": "python train.py",
    "gpus": 2,
    "bids": [{"gpu_type": "H100", "limit": "5"}],
    "max_hours": "2",
}
FORM = {
    "name": "train",
    "command": "python train.py",
    "gpus": "2",
    "max_hours": "2",
    "bids-0-gpu_type": "H100",
    "bids-0-limit": "5",
    "nonce": "n1",
}


def api_message(w: World, field: str, **change: Any) -> str:
    resp = w.client(w.alice).post(URL, {**API_BODY, **change}, format="json")
    assert resp.status_code == 400, resp.json()
    return str(resp.json()["fields"][field][0])


def portal_page(w: World, **change: str) -> str:
    resp = login(Client(), w.alice).post("/t/alpha/jobs/new/", {**FORM, **change})
    assert resp.status_code == 200 and not Job.objects.exists()
    return html.unescape(resp.content.decode())


def service_message(w: World, **change: Any) -> str:
    args: dict[str, Any] = {
        "tenant": w.alpha,
        "submitter": w.alice,
        "name": "train",
        "command": "run",
        "gpus": 1,
        "bids": [(w.h100, 5_000_000)],
        "max_seconds": 3600,
        "grace_seconds": None,
        **change,
    }
    with pytest.raises(PolicyError) as refused:
        job_submit(**args)
    return refused.value.message


def test_a_command_too_long_reads_the_same_everywhere(world: World, settings: Any) -> None:
    world.nodes(world.h100, 1, size=8)
    settings.JOB_COMMAND_MAX_CHARS = 10
    message = "is 11 characters; at most 10 are allowed"
    assert api_message(world, "command", command="x" * 11) == message
    assert f'id="id_command-error">{message}' in portal_page(world, command="x" * 11)
    assert service_message(world, command="x" * 11) == message


def test_a_bid_without_types_reads_the_same_everywhere(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    message = "must name at least one GPU type"
    assert api_message(world, "bids", bids=[]) == message
    assert f"bids: {message}" in portal_page(world, **{"bids-0-gpu_type": "", "bids-0-limit": ""})
    assert service_message(world, bids=[]) == message


def test_a_limit_above_the_maximum_reads_the_same_everywhere(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    message = "21 credits is above the maximum price of H100 (20 credits per GPU-hour)"
    assert api_message(world, "bids[0].limit", bids=[{"gpu_type": "H100", "limit": "21"}]) == message
    assert f'id="bids-0-limit-error">{message}' in portal_page(world, **{"bids-0-limit": "21"})
    assert service_message(world, bids=[(world.h100, 21_000_000)]) == message
