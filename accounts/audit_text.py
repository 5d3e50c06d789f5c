"""An audit row's detail as people read it (the console's audit log and its CSV; issue 37 §5).

Services store their detail as JSON in the units they compute with: money in micro-credits, a change as
[old, new], a tenant's guarantees as {type: GPUs}. Shown raw that reads as Python reprs of 12-digit numbers
("{'guardrail': [None, 5000000000]}"). Here each field becomes one line: money in credits, a change as
"old → new", nested values as "key: value" pairs, nothing as "none". The stored detail stays as it was.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from config.money import format_credits

# Detail keys whose numbers are micro-credits, whichever service wrote them.
MONEY = frozenset(
    {
        "amount",
        "cap",
        "charge",
        "guardrail",
        "limit",
        "max_price",
        "reserve_price",
        "posted",
        "price",
        "energy_price_kwh",
        "balance",
        "budget",
    }
)
# A spend alert's threshold and reading are micro-credits, except a runway rule's, which are hours.
MONEY_UNLESS_RUNWAY = frozenset({"threshold", "value"})


class Field(NamedTuple):
    name: str
    text: str


# Actions whose detail is a diff, {field: [old, new]}.
CHANGES = frozenset(
    {
        "policy.update",
        "tenant_policy.update",
        "spend_alert.update",
        "gpu_type.update",
        "allowance.update",
        "tenant.hold_policy",
    }
)


def detail_fields(detail: Any, action: str = "") -> list[Field]:
    """One (name, text) per key of the detail, in its order; `action` tells a diff's [old, new] from a list."""
    if not isinstance(detail, dict):
        return [Field("detail", _value(detail, money=False, changes=False))]
    runway = detail.get("kind") == "runway_hours"
    changes = action in CHANGES
    return [
        Field(str(key), _value(value, money=_is_money(str(key), runway), changes=changes))
        for key, value in detail.items()
    ]


def detail_text(detail: Any, action: str = "") -> str:
    """The whole detail on one line ("amount: 12.5 credits; memo: welcome"), for a CSV cell."""
    return "; ".join(f"{f.name}: {f.text}" for f in detail_fields(detail, action))


def _is_money(key: str, runway: bool) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return leaf in MONEY or (leaf in MONEY_UNLESS_RUNWAY and not runway)


def _value(value: Any, *, money: bool, changes: bool = False) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and money:
        return f"{format_credits(value)} credits"
    if isinstance(value, int | float):
        return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)
    if isinstance(value, str):
        return value or '""'
    if isinstance(value, list):
        if changes and len(value) == 2:
            # A change, as every service's diff writes it: [old, new].
            return f"{_value(value[0], money=money)} → {_value(value[1], money=money)}"
        return ", ".join(_value(v, money=money) for v in value) or "none"
    if isinstance(value, dict):
        inner = [f"{k}: {_value(v, money=money or _is_money(str(k), False))}" for k, v in value.items()]
        return "(" + ", ".join(inner) + ")" if inner else "none"
    return str(value)
