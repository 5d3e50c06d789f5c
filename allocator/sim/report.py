"""Writing the results: summary.json and the comparison table printed after the JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = (
    ("policy", "policy", "{}"),
    ("done", "completed", "{}"),
    ("rej", "rejected", "{}"),
    ("avg JCT h", "avg_jct_s", "h"),
    ("p95 JCT h", "p95_jct_s", "h"),
    ("avg queue h", "avg_queue_s", "h"),
    ("p50 queue s", "p50_queue_s", "{:.0f}"),
    ("p95 queue h", "p95_queue_s", "h"),
    ("util", "utilization", "{:.3f}"),
    ("busy util", "busy_utilization", "{:.3f}"),
    ("guar. compl.", "guarantee_compliance", "{:.4f}"),
    ("FS 24h", "fair_share_compliance_24h", "{:.3f}"),
    ("FS 1h", "fair_share_compliance_1h", "{:.3f}"),
    ("FS round", "fair_share_round_compliance", "{:.3f}"),
    ("shortfall", "fair_share_shortfall", "{:.4f}"),
    ("preempt", "preemptions", "{}"),
    ("pred. MdAPE", "prediction_mdape", "{:.2f}"),
    ("p90 exceeded", "prediction_p90_exceeded", "{:.3f}"),
    ("makespan d", "makespan_s", "d"),
    ("wall s", "sim_wall_s", "{:.1f}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "h":
        return f"{value / 3600:.2f}"
    if fmt == "d":
        return f"{value / 86400:.1f}"
    return fmt.format(value)


def table(summaries: list[dict[str, Any]]) -> str:
    """A Markdown table comparing the policies of one scenario side by side."""
    head = "| " + " | ".join(title for title, _, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = ["| " + " | ".join(_cell(s.get(key), fmt) for _, key, fmt in COLUMNS) + " |" for s in summaries]
    return "\n".join([head, rule, *rows])


def write_summary(out: Path, summaries: list[dict[str, Any]]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")
    return path
