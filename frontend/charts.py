"""Charts drawn server-side as inline SVG: no script and nothing fetched from the internet.

Every label is escaped here (tenant and job names end up in legends), so a template may print the result
with no further escaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# A palette that stays distinguishable for the common kinds of colour blindness (Okabe-Ito).
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
DASHES = ("", "6 3", "2 3", "8 3 2 3")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (x, y); x is a Unix time when the chart's x axis is time
    dash: int = 0  # index into DASHES, to tell apart lines of one colour
    colour: int | None = None  # index into COLOURS; by default the series' position


def _colour(series: Series, position: int) -> str:
    return COLOURS[(position if series.colour is None else series.colour) % len(COLOURS)]


def _x_label(x: float, time_axis: bool, span: float = 0) -> str:
    if not time_axis:
        return f"{x:g}"
    # Seconds too when the whole axis is shorter than an hour (a short job's usage), else they are noise.
    return datetime.fromtimestamp(x, tz=UTC).strftime(
        "%d %b %H:%M:%S UTC" if span < 3600 else "%d %b %H:%M UTC"
    )


def _y_label(y: float) -> str:
    return f"{y:,.2f}".rstrip("0").rstrip(".") if y % 1 else f"{y:,.0f}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    y_unit: str = "",
    width: int = 640,
    height: int = 220,
    time_axis: bool = True,
    step: bool = False,
) -> SafeString:
    """Lines (or steps) for each series with axes, min/max ticks and a legend; an empty chart says so."""
    points = [p for s in series for p in s.points]
    label = escape(title)
    if not points:
        return mark_safe(f'<p class="empty-chart">{label}: no data yet.</p>')
    left, right, top, bottom = 56, 8, 8, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    if x1 <= x0:  # one x value: centre it in a span of a day (time) or of 2
        pad = 43_200 if time_axis else 1
        x0, x1 = x0 - pad, x1 + pad
    y1 = y1 if y1 > y0 else y0 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{label}" '
        f'preserveAspectRatio="xMidYMid meet"><title>{label}</title>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" class="axis"/>',
        f'<text x="{left - 4}" y="{top + 10}" text-anchor="end">{escape(_y_label(y1))}</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">{escape(_y_label(y0))}</text>',
        f'<text x="{left}" y="{height - 4}">{escape(_x_label(x0, time_axis, x1 - x0))}</text>',
        f'<text x="{left + plot_w}" y="{height - 4}" text-anchor="end">{escape(_x_label(x1, time_axis, x1 - x0))}</text>',
    ]
    if y_unit:
        parts.append(f'<text x="{left + 4}" y="{top + 10}" class="unit">{escape(y_unit)}</text>')
    for i, s in enumerate(series):
        pts = sorted(s.points)
        coords: list[str] = []
        for j, (x, y) in enumerate(pts):
            if step and j:
                coords.append(f"{sx(x):.1f},{sy(pts[j - 1][1]):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
        colour = _colour(s, i)
        dash = DASHES[s.dash % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if len(pts) == 1:
            parts.append(
                f'<circle cx="{coords[0].split(",")[0]}" cy="{coords[0].split(",")[1]}" r="3" '
                f'fill="{colour}"><title>{escape(s.label)}</title></circle>'
            )
        else:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash_attr} '
                f'points="{" ".join(coords)}"><title>{escape(s.label)}</title></polyline>'
            )
    parts.append("</svg>")
    legend = "".join(
        f'<li><span class="swatch" style="border-color:{_colour(s, i)};'
        f'border-style:{"dashed" if s.dash else "solid"}"></span>{escape(s.label)}</li>'
        for i, s in enumerate(series)
    )
    return mark_safe(
        f'<figure class="chart-box"><figcaption>{label}</figcaption>{"".join(parts)}'
        f'<ul class="legend">{legend}</ul></figure>'
    )


def sparkline(values: Sequence[float], *, label: str, width: int = 120, height: int = 28) -> SafeString:
    """A small trend line without axes, for tables; its accessible name carries the first and last value."""
    if len(values) < 2:
        return mark_safe('<span class="muted">not enough rounds</span>')
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    step = width / (len(values) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - 2 - (v - lo) / span * (height - 4):.1f}" for i, v in enumerate(values)
    )
    name = escape(f"{label}: from {_y_label(values[0])} to {_y_label(values[-1])}")
    return mark_safe(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{name}"><title>{name}</title><polyline fill="none" stroke="{COLOURS[0]}" '
        f'stroke-width="1.5" points="{coords}"/></svg>'
    )
