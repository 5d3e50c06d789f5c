"""The portal's forms speak the API's language: the job forms are checked by the API's own serializers
(market/api/jobs_serializers.py) and the services behind them, so both doors give the same messages, and
each message is shown beside the field it names (`bids[1].limit`, as the API names it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import QueryDict

from config.api import flatten_errors
from config.money import format_credits
from inventory.models import GpuType


@dataclass
class BidRow:
    index: int
    gpu_type: str
    limit: str
    type_error: str = ""
    limit_error: str = ""


def bid_rows(
    data: QueryDict | None, types: list[GpuType], current: list[dict[str, Any]] | None = None
) -> list[BidRow]:
    """One row per GPU type (a bid names each type at most once): from the posted form, else from the
    current bid, else empty."""
    rows = []
    for i in range(len(types)):
        if data is not None:
            rows.append(BidRow(i, data.get(f"bids-{i}-gpu_type", ""), data.get(f"bids-{i}-limit", "")))
        elif current and i < len(current):
            rows.append(
                BidRow(i, current[i]["gpu_type"], format_credits(current[i]["limit"]).replace(",", ""))
            )
        else:
            rows.append(BidRow(i, "", ""))
    return rows


def bids_payload(rows: list[BidRow]) -> list[dict[str, str]]:
    """The rows the user filled, as the API's `bids` list (a row with neither type nor limit is skipped)."""
    return [{"gpu_type": r.gpu_type, "limit": r.limit.strip()} for r in rows if r.gpu_type or r.limit.strip()]


def flatten(detail: Any) -> dict[str, str]:
    """DRF's error detail as {"name": "...", "bids[1].limit": "..."}, named as the API names them."""
    flat = flatten_errors(detail)
    return {"form" if f == "non_field_errors" else f: " ".join(m) for f, m in flat.items()}


def place_bid_errors(rows: list[BidRow], errors: dict[str, str], posted: list[int]) -> None:
    """Move `bids[i].x` errors onto the rows; `i` counts the filled rows only (what the API saw)."""
    for api_index, row_index in enumerate(posted):
        row = rows[row_index]
        row.type_error = errors.pop(f"bids[{api_index}].gpu_type", "")
        row.limit_error = errors.pop(f"bids[{api_index}].limit", "")


def unplaced_to_form(errors: dict[str, str], shown: set[str]) -> None:
    """An error for a field the page has no place for (the hidden nonce's `Idempotency-Key`, a field only a
    hostile client sends) goes to the form's own error, so no refusal is silent."""
    stray = [f"{field}: {errors.pop(field)}" for field in list(errors) if field not in shown | {"form"}]
    if stray:
        errors["form"] = " ".join(filter(None, [errors.get("form", ""), *stray]))
