"""Hostile input through the portal's forms (issue 19): every form a member, manager or admin can post
(submit a job, amend its bid, create a token; the console's top-up and refund, allowance, tenant policy,
member, new tenant, market policy and bootstrap token) and the GET filters, with each field set in turn to
huge and non-finite numbers, deep nesting, NUL, a lone surrogate, an oversized value and the wrong type.

Each answer is the form again with an error (200), or a 400 naming the field for what no browser can send
(NUL, a body over the size limit); never a 500, never a redirect that means "saved", and nothing written.
Sent as raw urlencoded bodies, as a hostile client would, so a lone surrogate arrives as its UTF-8-style
bytes (%ED%A0%80) and repeated fields as lists."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from accounts.models import ApiToken, AuditEvent, GroupMapping, Membership, Tenant
from market.models import Bid, Job, JournalEntry, MarketPolicy, SpendAlertRule
from market.selectors.policy import market_policy
from nodeagent.models import BootstrapToken
from tests.conftest import World
from tests.frontend.conftest import login
from tests.market.round_helpers import make_job

# slow: minutes of generated or hostile input; `make check` leaves it out, `make test` runs it.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# (label, raw urlencoded value): what a hostile client can put in one field.
HOSTILE = [
    ("huge exponent", quote("1e999999999")),
    ("exponent 25", quote("1e25")),
    ("5000 digits", "9" * 5000),
    ("negative 5000 digits", "-" + "9" * 5000),
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", quote("-Infinity")),
    ("deep nesting", quote("[" * 1000 + "]" * 1000)),
    ("json object", quote('{"a": 1}')),
    ("NUL", "1%00"),
    ("lone surrogate", "%ED%A0%80"),
    ("invalid utf-8", "%FF%FE"),
    ("oversized", "7" * 200_000),
    ("negative", "-1"),
    ("zero", "0"),
    ("fraction", "0.0000001"),
    ("boolean", "true"),
    ("empty", ""),
]


@dataclass
class Form:
    who: str
    url: Callable[[dict[str, Any]], str]
    fields: dict[str, str]  # a valid submission
    hostile: list[str]  # the fields to corrupt, one at a time


FORMS = {
    "submit job": Form(
        "amy",
        lambda o: "/t/alpha/jobs/new/",
        {
            "name": "train",
            "command": "python train.py",
            "gpus": "1",
            "max_hours": "1",
            "grace_seconds": "30",
            "bids-0-gpu_type": "H100",
            "bids-0-limit": "3",
            "nonce": "n1",
        },
        ["name", "command", "gpus", "max_hours", "grace_seconds", "bids-0-gpu_type", "bids-0-limit", "nonce"],
    ),
    "amend bid": Form(
        "amy",
        lambda o: f"/t/alpha/jobs/{o['pending']}/amend/",
        {"bids-0-gpu_type": "H100", "bids-0-limit": "4"},
        ["bids-0-gpu_type", "bids-0-limit"],
    ),
    "create token": Form("amy", lambda o: "/t/alpha/tokens/", {"name": "laptop"}, ["name"]),
    "spend alert": Form(
        "alice",
        lambda o: "/t/alpha/alerts/",
        {
            "kind": "spend_day",
            "threshold": "5",
            "action": "cap",
            "cap": "10",
            "webhook_url": "https://example.org/hook",
            "email": "on",
        },
        ["kind", "threshold", "action", "cap", "webhook_url"],
    ),
    "top-up": Form(
        "admin",
        lambda o: "/console/tenants/alpha/",
        {"action": "money", "amount": "5", "money_kind": "topup", "memo": "m", "nonce": "n2"},
        ["amount", "money_kind", "memo", "nonce"],
    ),
    "refund": Form(
        "admin",
        lambda o: "/console/tenants/alpha/",
        {"action": "money", "amount": "5", "money_kind": "refund", "memo": "m", "nonce": "n3"},
        ["amount", "memo"],
    ),
    "allowance": Form(
        "admin",
        lambda o: "/console/tenants/alpha/",
        {
            "action": "allowance",
            "allowance_amount": "5",
            "allowance_cap": "10",
            "allowance_period": "day",
            "allowance_active": "on",
        },
        ["allowance_amount", "allowance_cap", "allowance_period"],
    ),
    "tenant policy": Form(
        "admin",
        lambda o: "/console/tenants/alpha/",
        {"action": "policy", "weight": "3", "guardrail": "100", "guarantee-H100": "1"},
        ["weight", "guardrail", "guarantee-H100"],
    ),
    "member": Form(
        "admin",
        lambda o: "/console/tenants/alpha/",
        {"action": "member", "username": "cara", "role": "member"},
        ["username", "role"],
    ),
    "new tenant": Form(
        "admin",
        lambda o: "/console/tenants/",
        {"name": "Delta", "slug": "delta", "weight": "1"},
        ["name", "slug", "weight"],
    ),
    "group mapping": Form(
        "admin",
        lambda o: "/console/sso/",
        {"group": "ml-team", "tenant": "alpha", "role": "member"},
        ["group", "tenant", "role"],
    ),
    "bootstrap token": Form(
        "admin",
        lambda o: "/console/nodes/bootstrap-token/",
        {"name": "gpu-9", "gpu_type": "H100", "topology_domain": "rack-a", "ttl_hours": "24"},
        ["name", "gpu_type", "topology_domain", "ttl_hours"],
    ),
}

# GET forms: filters. Any status but a 500 (a 400 for NUL), and nothing written.
FILTERS = [
    ("amy", "/t/alpha/spend/", ["since", "until", "kind", "job", "gpu_type", "page"]),
    ("amy", "/t/alpha/spend.csv", ["since", "until", "kind", "job", "gpu_type"]),
    ("amy", "/t/alpha/jobs/", ["state", "page"]),
    ("amy", "/t/alpha/jobs/guidance/", ["gpus", "bids-0-gpu_type", "bids-0-limit"]),
    ("admin", "/console/audit/", ["tenant", "actor", "action", "since", "until", "page"]),
    ("admin", "/console/nodes/", ["state", "page"]),
    ("admin", "/console/market/", ["window", "page"]),
]


@pytest.fixture
def objects(world: World) -> dict[str, Any]:
    world.fund(world.alpha, 100)
    pending = make_job(world.alpha, world.amy, gpus=1, limits={world.h100: 1}, name="pending")
    market_policy()  # made on first read: a page's GET must not count as a write
    return {"pending": pending.pk}


def _state() -> tuple[Any, ...]:
    """Every table a portal form writes to."""
    return (
        Job.objects.count(),
        list(Bid.objects.order_by("pk").values_list("job_id", "version", "limits")),
        list(Job.objects.order_by("pk").values_list("bid_version", "cancel_requested_at")),
        ApiToken.objects.count(),
        JournalEntry.objects.count(),
        list(Tenant.objects.order_by("pk").values_list("slug", "weight", "guardrail")),
        list(Membership.objects.order_by("pk").values_list("user_id", "tenant_id", "role")),
        BootstrapToken.objects.count(),
        list(MarketPolicy.objects.values()),
        AuditEvent.objects.count(),
        SpendAlertRule.objects.count(),
        GroupMapping.objects.count(),
    )


def _body(fields: dict[str, str], field: str, raw: str) -> str:
    return "&".join(f"{quote(k)}={raw if k == field else quote(v)}" for k, v in fields.items())


@pytest.mark.parametrize("form", FORMS)
def test_hostile_values_in_every_form_field_are_refused_and_write_nothing(
    world: World, objects: dict[str, Any], form: str
) -> None:
    spec = FORMS[form]
    client = login(Client(), getattr(world, spec.who))
    url = spec.url(objects)
    wrong = []
    for field in spec.hostile:
        for label, raw in HOSTILE:
            before = _state()
            body = _body(spec.fields, field, raw)
            response = client.post(url, body, content_type="application/x-www-form-urlencoded")
            written = _state() != before
            outcome = (field, label, response.status_code, written)
            if response.status_code >= 500 or (label == "NUL" and (response.status_code != 400 or written)):
                wrong.append(outcome)
            elif written and (form, field, label) not in VALID:
                wrong.append(outcome)  # saved something it should have refused
            elif (
                not written
                and response.status_code == 200
                and 'class="error"' not in response.content.decode()
            ):
                wrong.append(outcome)  # refused without saying why
    assert not wrong, wrong


# Hostile-looking values that are valid input for that field, so the form rightly saves them: free text
# (names, commands, memos, nonces) may be any text without NUL; an invalid UTF-8 sequence or a lone surrogate
# arrives as U+FFFD (Django decodes form bodies with errors="replace"); 0 GPUs guaranteed and no guardrail
# ("") are policies.
TEXT = ["huge exponent", "exponent 25", "5000 digits", "negative 5000 digits", "NaN", "Infinity", "-Infinity"]
TEXT += ["deep nesting", "json object", "lone surrogate", "invalid utf-8", "negative", "zero", "fraction"]
TEXT += ["boolean"]
VALID: set[tuple[str, str, str]] = {
    (form, field, label)
    for form, field in [
        ("submit job", "name"),
        ("submit job", "command"),
        ("submit job", "nonce"),
        ("create token", "name"),
        ("top-up", "memo"),
        ("top-up", "nonce"),
        ("refund", "memo"),
        ("bootstrap token", "topology_domain"),
        ("new tenant", "name"),
        ("group mapping", "group"),
    ]
    for label in TEXT
}
VALID |= {
    (form, field, label) for form in ("top-up", "refund") for field in ("memo", "nonce") for label in TEXT
}
VALID |= {("top-up", "memo", "empty"), ("refund", "memo", "empty"), ("top-up", "nonce", "empty")}
# Names that are also numbers are still names: letters, digits, "." and "-" make a valid node name or slug.
VALID |= {("bootstrap token", "name", label) for label in ["huge exponent", "exponent 25", "NaN", "Infinity"]}
VALID |= {("bootstrap token", "name", label) for label in ["zero", "fraction", "boolean", "5000 digits"]}
VALID |= {("new tenant", "slug", label) for label in ["huge exponent", "exponent 25", "NaN", "Infinity"]}
VALID |= {("new tenant", "slug", label) for label in ["zero", "fraction", "boolean", "negative"]}
# Every field of a bootstrap token is optional (docs/agent.md); the console's money nonce is cut to 64
# characters (the server makes 32; a longer one only collides with the sender's own).
VALID |= {
    ("bootstrap token", field, "empty") for field in ("name", "gpu_type", "topology_domain", "ttl_hours")
}
VALID |= {("top-up", "nonce", "oversized")}
# Policies: no guardrail (""), a guardrail or cap of 0, no guaranteed GPUs.
VALID |= {("tenant policy", "guarantee-H100", "zero"), ("tenant policy", "guardrail", "empty")}
VALID |= {("tenant policy", "guardrail", "zero"), ("allowance", "allowance_cap", "zero")}
# A spend alert without a webhook (docs/alerts.md).
VALID |= {("spend alert", "webhook_url", "empty")}


@pytest.mark.parametrize(("who", "url", "params"), FILTERS)
def test_hostile_filter_values_never_give_a_500(
    world: World, objects: dict[str, Any], who: str, url: str, params: list[str]
) -> None:
    client = login(Client(), getattr(world, who))
    before = _state()
    for param in params:
        for label, raw in HOSTILE:
            response = client.get(f"{url}?{param}={raw}")
            assert response.status_code < 500, (url, param, label, response.status_code)
            if label == "NUL":
                assert response.status_code == 400, (url, param)
    assert _state() == before
