"""Console: propose a policy version directly (docs/portal.md, docs/policy.md §Versions). The form starts from
the policy in force (market knobs, GPU types' price bounds, each active tenant's weight, guardrail and
guarantees); what the admin changed becomes a partial snapshot for policy_version_propose, which checks it
with the policy writers' own rules. Its refusals name a path in the snapshot, mapped back to the field here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect

from config.errors import PolicyError
from config.money import AmountError, format_credits, parse_credits
from frontend.access import admin_only, page
from frontend.views.console_market import MONEY_KNOBS, POLICY_LABELS
from market.models.policy import POLICY_LIMITS
from market.selectors.policy_snapshot import PolicySnapshot, policy_snapshot
from market.services.policy_proposals import policy_version_propose


def _credits(micro: int | None) -> str:
    return "" if micro is None else format_credits(micro).replace(",", "")


def initial(snap: PolicySnapshot) -> dict[str, str]:
    """The form's values for a snapshot: money in credits, as the Market and Tenants pages show it."""
    values = {f"market-{k}": _credits(v) if k in MONEY_KNOBS else str(v) for k, v in snap["market"].items()}
    for name, prices in snap["gpu_types"].items():
        values[f"reserve-{name}"] = _credits(prices["reserve_price"])
        values[f"max-{name}"] = _credits(prices["max_price"])
    for slug, t in snap["tenants"].items():
        values[f"weight-{slug}"] = str(t["weight"])
        values[f"guardrail-{slug}"] = _credits(t["guardrail"])
        for name in snap["gpu_types"]:
            values[f"guarantee-{slug}-{name}"] = str(t["guarantees"].get(name, 0))
    return values


@dataclass
class Parsed:
    snapshot: dict[str, Any]
    errors: dict[str, str]


def _number(raw: str, field: str, errors: dict[str, str], *, money: bool, blank_ok: bool = False) -> Any:
    raw = raw.strip()
    if not raw and blank_ok:
        return None
    try:
        return parse_credits(raw) if money else int(raw)
    except AmountError as exc:
        errors[field] = str(exc)
    except ValueError:
        errors[field] = "must be a whole number"
    return None


def parse(post: QueryDict, snap: PolicySnapshot) -> Parsed:
    """The partial snapshot of what differs from `snap` (the policy in force), or the fields' errors.
    Only the changes are proposed, so the draft's diff shows exactly what the admin edited."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {"market": {}, "gpu_types": {}, "tenants": {}}

    def read(field: str, money: bool, blank_ok: bool = False) -> Any:
        return _number(post.get(field, ""), field, errors, money=money, blank_ok=blank_ok)

    for knob, now in snap["market"].items():
        value = read(f"market-{knob}", knob in MONEY_KNOBS)
        if value is not None and value != now:
            out["market"][knob] = value
    for name, prices in snap["gpu_types"].items():
        new = {"reserve_price": read(f"reserve-{name}", True), "max_price": read(f"max-{name}", True)}
        if None not in new.values() and new != prices:
            out["gpu_types"][name] = new
    for slug, t in snap["tenants"].items():
        given: dict[str, Any] = {}
        weight = read(f"weight-{slug}", False)
        if weight is not None and weight != t["weight"]:
            given["weight"] = weight
        guardrail = read(f"guardrail-{slug}", True, blank_ok=True)
        if f"guardrail-{slug}" not in errors and guardrail != t["guardrail"]:
            given["guardrail"] = guardrail
        guarantees = {}
        for name in snap["gpu_types"]:
            gpus = read(f"guarantee-{slug}-{name}", False)
            if gpus is not None and gpus != t["guarantees"].get(name, 0):
                guarantees[name] = gpus
        if guarantees:
            given["guarantees"] = guarantees
        if given:
            out["tenants"][slug] = given
    reason = post.get("reason", "").strip()
    if not reason:
        errors["reason"] = "say why: the reason is kept with the version"
    if not errors and not any(out.values()):
        errors["form"] = "nothing changed: edit at least one setting to propose"
    return Parsed({k: v for k, v in out.items() if v}, errors)


def field_of(exc: PolicyError) -> tuple[str, str]:
    """The form field a refusal's snapshot path names (`snapshot.tenants.beta.weight` -> `weight-beta`),
    and its message; a path the form has no field for goes to the form's own error, path and all."""
    parts = exc.field.split(".")
    match parts:
        case ["reason"]:
            return "reason", exc.message
        case ["snapshot", "market", knob] if knob in MONEY_KNOBS:
            low, high = (format_credits(v) for v in POLICY_LIMITS[knob])
            return f"market-{knob}", f"must be between {low} and {high} credits"
        case ["snapshot", "market", knob]:
            return f"market-{knob}", exc.message
        case ["snapshot", "gpu_types", name, bound]:
            return f"{'reserve' if bound == 'reserve_price' else 'max'}-{name}", exc.message
        case ["snapshot", "tenants", slug, ("weight" | "guardrail") as key]:
            return f"{key}-{slug}", exc.message
        case ["snapshot", "tenants", slug, "guarantees", name]:
            return f"guarantee-{slug}-{name}", exc.message
        case ["snapshot", "guarantees", name]:
            return f"guarantees-{name}", exc.message
    return "form", f"{exc.field}: {exc.message}"


def _context(snap: PolicySnapshot, values: dict[str, str], errors: dict[str, str]) -> dict[str, Any]:
    def cell(name: str) -> dict[str, str]:
        return {"name": name, "value": values.get(name, ""), "error": errors.get(name, "")}

    types = list(snap["gpu_types"])
    return {
        "knobs": [
            {
                **cell(f"market-{k}"),
                "label": POLICY_LABELS.get(k, k),
                "money": k in MONEY_KNOBS,
                "low": _credits(POLICY_LIMITS[k][0]) if k in MONEY_KNOBS else POLICY_LIMITS[k][0],
                "high": _credits(POLICY_LIMITS[k][1]) if k in MONEY_KNOBS else POLICY_LIMITS[k][1],
            }
            for k in snap["market"]
        ],
        "type_rows": [(t, cell(f"reserve-{t}"), cell(f"max-{t}")) for t in types],
        "types": [(t, errors.get(f"guarantees-{t}", "")) for t in types],
        "tenant_rows": [
            (
                slug,
                cell(f"weight-{slug}"),
                cell(f"guardrail-{slug}"),
                [cell(f"guarantee-{slug}-{t}") for t in types],
            )
            for slug in snap["tenants"]
        ],
        "reason": cell("reason"),
        "errors": errors,
    }


@admin_only
def version_new(request: HttpRequest) -> HttpResponse:
    """The form's nonce is the idempotency key: a resent form proposes once."""
    snap = policy_snapshot()
    values, errors = initial(snap), {}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in [*values, "reason"]}
        parsed = parse(request.POST, snap)
        errors = parsed.errors
        if not errors:
            nonce = request.POST.get("nonce", "")[:64]
            try:
                version = policy_version_propose(
                    actor=request.user,  # type: ignore[arg-type]  # request.user: User | AnonymousUser; admin_only leaves a staff User
                    snapshot=parsed.snapshot,
                    reason=request.POST.get("reason", ""),
                    key=f"console-propose:{nonce}" if nonce else None,
                )
            except PolicyError as exc:
                errors = dict([field_of(exc)])
            else:
                messages.success(request, f"Proposed version {version.number}: nothing in force changed.")
                return redirect("frontend:console_version", number=version.number)
    context = _context(snap, values, errors)
    context["nonce"] = request.POST.get("nonce") if errors else uuid.uuid4().hex
    response = page(request, "frontend/console/version_new.html", context)
    if errors:
        response.status_code = 400
    return response
