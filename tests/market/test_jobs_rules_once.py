"""Job rules live in the service (market/services/jobs.py); the API's serializer calls them and the portal's
form goes through the serializer, so the same bad input gets the same message at both doors and from the
service itself (issue 26 §4)."""

from __future__ import annotations

import html
import re
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


# The same bad value through both doors: the API's JSON body and the portal's form (its text), and where the
# value can reach it, the service itself. Each case: the field as the API names it, the JSON value, the form's
# text for it, and job_submit's argument for it (None where no such value reaches the service: a text that is
# no number, decimals finer than it stores).
BOTH_DOORS: dict[str, tuple[str, Any, str, dict[str, Any] | None]] = {
    "blank name": ("name", "   ", "   ", {"name": "   "}),
    "long name": ("name", "n" * 201, "n" * 201, {"name": "n" * 201}),
    "blank command": ("command", "  ", "  ", {"command": "  "}),
    "no GPUs": ("gpus", 0, "0", {"gpus": 0}),
    "negative GPUs": ("gpus", -2, "-2", {"gpus": -2}),
    "too many GPUs": ("gpus", 9, "9", {"gpus": 9}),
    "GPUs not a number": ("gpus", "two", "two", {"gpus": "two"}),
    "no hours": ("max_hours", "0", "0", {"max_seconds": 0}),
    "under a minute": ("max_hours", "0.01", "0.01", {"max_seconds": 36}),
    "too many hours": ("max_hours", "100000", "100000", {"max_seconds": 100_000 * 3600}),
    "hours with 5 decimals": ("max_hours", "1.00001", "1.00001", None),
    "hours not a number": ("max_hours", "soon", "soon", None),
    "negative grace": ("grace_seconds", -1, "-1", {"grace_seconds": -1}),
    "grace above an hour": ("grace_seconds", 3601, "3601", {"grace_seconds": 3601}),
    "grace not a number": ("grace_seconds", "x", "x", {"grace_seconds": "x"}),
    "no limit": ("bids[0].limit", "0", "0", {"bids": [("H100", 0)]}),
    "limit above the maximum": ("bids[0].limit", "21", "21", {"bids": [("H100", 21_000_000)]}),
    "limit with 7 decimals": ("bids[0].limit", "1.0000001", "1.0000001", None),
    "limit not a number": ("bids[0].limit", "cheap", "cheap", None),
    "unknown type": ("bids[0].gpu_type", "Z100", "Z100", None),
}


def _api_change(field: str, value: Any) -> dict[str, Any]:
    if field.startswith("bids[0]."):
        entry = {**API_BODY["bids"][0], field.removeprefix("bids[0]."): value}
        return {"bids": [entry]}
    return {field: value}


def _form_change(field: str, text: str) -> dict[str, str]:
    if field.startswith("bids[0]."):
        return {f"bids-0-{field.removeprefix('bids[0].')}": text}
    return {field: text}


def _portal_error(page_html: str, field: str) -> str:
    anchor = f"bids-0-{field.removeprefix('bids[0].')}" if field.startswith("bids[0].") else f"id_{field}"
    found = re.search(rf'id="{re.escape(anchor)}-error">([^<]*)<', page_html)
    assert found, f"no error shown for {field}"
    return found.group(1)


@pytest.mark.parametrize("case", list(BOTH_DOORS))
def test_the_same_bad_value_reads_the_same_through_api_and_portal(world: World, case: str) -> None:
    """The API's 400 names the field and the portal shows the same message beside that field; where the value
    can reach the service, its refusal (market.services.jobs, where the rules live) reads the same too."""
    world.nodes(world.h100, 1, size=8)
    field, value, text, service_args = BOTH_DOORS[case]
    through_api = api_message(world, field, **_api_change(field, value))
    through_portal = _portal_error(portal_page(world, **_form_change(field, text)), field)
    assert through_api == through_portal, case
    if service_args is not None:
        if "bids" in service_args:
            service_args = {"bids": [(world.h100, limit) for _, limit in service_args["bids"]]}
        assert service_message(world, **service_args) == through_api, case
