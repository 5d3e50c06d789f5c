"""The per-GPU-type speed table's cells for people (the submit form's JSON and the job page render the same
strings), from market.selectors.speed.SpeedGuide."""

from __future__ import annotations

from typing import Any

from config.money import format_fixed
from market.selectors.predictions import hours
from market.selectors.speed import SpeedGuide, TypeSpeed

_CLIPPED = {"reserve": " (its reserve)", "max": " (its maximum)"}


def _basis(row: TypeSpeed, reference: str) -> str:
    f = row.factor
    if f.factor is None:
        return "cold start"
    if row.gpu_type == reference:
        return "reference"
    via = f" (through {f.via})" if f.via else ""
    return f"{f.runs} runs here, {f.reference_runs} on {reference}{via}; {f.confidence} confidence"


def speed_cells(guide: SpeedGuide) -> dict[str, Any]:
    """The table's caption text and one dict of display strings per GPU type."""
    rows = []
    for row in guide.rows:
        known = row.factor.factor is not None
        rows.append(
            {
                "gpu_type": row.gpu_type,
                "speed": f"{row.factor.factor:.2f}x" if row.factor.factor is not None else "unknown",
                "runtime": hours(row.runtime_s) if row.runtime_s is not None else "unknown",
                "cost": format_fixed(row.cost) if row.cost is not None else "unknown",
                "limit": (
                    format_fixed(row.suggested_limit) + _CLIPPED.get(row.limit_clipped or "", "")
                    if known and row.suggested_limit is not None
                    else "unknown"
                ),
                "basis": _basis(row, guide.reference),
                "text": row.text,
            }
        )
    return {"reference": guide.reference, "text": guide.text, "rows": rows}
