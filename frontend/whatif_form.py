"""The what-if form of the console: a window of history and a proposed policy, parsed from POST data.

Field names: since, until (UTC, `YYYY-MM-DDTHH:MM`), price_step_bp, min_runtime_s, fair_share_half_life_s,
checkpoint_min (a field left out of the POST keeps today's value), fair_reclaim (a checkbox),
reserve-<type>, max-<type> (credits per GPU-hour), weight-<tenant>, guarantee-<tenant>-<type> (GPUs). Each bad
value is an error under its field's name; the service's PolicyError names fields the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils import timezone

from config.money import AmountError, format_credits, parse_credits
from whatif.policy import FIXED_KNOBS, KNOBS, Policy

DATETIME_FORMAT = "%Y-%m-%dT%H:%M"
DEFAULT_DAYS = 7
MAX_INT_DIGITS = 12  # longer than any bound the services accept; keeps int() of hostile input cheap


@dataclass
class Parsed:
    since: datetime | None = None
    until: datetime | None = None
    proposal: Policy = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _moment(data: QueryDict, name: str, errors: dict[str, str]) -> datetime | None:
    raw = data.get(name, "").strip()
    try:
        return datetime.strptime(raw, DATETIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        errors[name] = "must be a date and time, YYYY-MM-DDTHH:MM (UTC)"
        return None


def _whole(data: QueryDict, name: str, errors: dict[str, str]) -> int | None:
    raw = data.get(name, "").strip()
    if not raw.isdigit() or len(raw) > MAX_INT_DIGITS:
        errors[name] = "must be a whole number"
        return None
    return int(raw)


def _credits(data: QueryDict, name: str, errors: dict[str, str]) -> int | None:
    try:
        return parse_credits(data.get(name, "").strip())
    except AmountError as exc:
        errors[name] = str(exc)
        return None


def parse(data: QueryDict, base: Policy) -> Parsed:
    """Everything the form says, with one error per bad field; the proposal names exactly `base`'s types
    and tenants (a field for another is ignored, a missing one is an error)."""
    out = Parsed()
    errors = out.errors
    out.since, out.until = _moment(data, "since", errors), _moment(data, "until", errors)
    proposal: dict[str, Any] = {k: base[k] for k in FIXED_KNOBS}  # today's: the form does not change them
    for knob in KNOBS:
        proposal[knob] = _whole(data, knob, errors) if knob in data else base[knob]
    proposal["checkpoint_min"] = (
        _whole(data, "checkpoint_min", errors) if "checkpoint_min" in data else base["checkpoint_min"]
    )
    proposal["fair_reclaim"] = data.get("fair_reclaim") == "on"
    proposal["types"] = {
        name: {
            "reserve": _credits(data, f"reserve-{name}", errors),
            "max": _credits(data, f"max-{name}", errors),
        }
        for name in base["types"]
    }
    proposal["tenants"] = {
        slug: {
            "weight": _whole(data, f"weight-{slug}", errors),
            "guarantees": {
                name: gpus
                for name in base["types"]
                if (gpus := _whole(data, f"guarantee-{slug}-{name}", errors))
            },
        }
        for slug in base["tenants"]
    }
    out.proposal = proposal
    return out


def initial(base: Policy) -> dict[str, str]:
    """The form's values for today's policy over the last week."""
    now = timezone.now().astimezone(UTC)
    values = {
        "since": (now - timedelta(days=DEFAULT_DAYS)).strftime(DATETIME_FORMAT),
        "until": (now + timedelta(minutes=1)).strftime(DATETIME_FORMAT),
        "fair_reclaim": "on" if base["fair_reclaim"] else "",
    }
    values |= {k: str(base[k]) for k in (*KNOBS, "checkpoint_min")}
    for name, prices in base["types"].items():
        values[f"reserve-{name}"] = format_credits(prices["reserve"]).replace(",", "")
        values[f"max-{name}"] = format_credits(prices["max"]).replace(",", "")
    for slug, t in base["tenants"].items():
        values[f"weight-{slug}"] = str(t["weight"])
        for name in base["types"]:
            values[f"guarantee-{slug}-{name}"] = str(t["guarantees"].get(name, 0))
    return values
