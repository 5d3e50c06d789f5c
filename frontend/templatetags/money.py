"""Money and time in templates: credits with a fixed number of decimals, times the browser localises."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from config.money import format_fixed
from market.selectors.lost_work import gpu_time as _gpu_time
from market.selectors.spend import runway_text

register = template.Library()


@register.filter
def credits(micro: int | None) -> str:
    return "–" if micro is None else format_fixed(micro)


@register.filter
def when(moment: datetime | None) -> SafeString | str:
    """A <time> element in UTC; frontend/static/frontend/site.js rewrites it in the viewer's time zone."""
    if moment is None:
        return "–"
    return format_html(
        '<time datetime="{}">{}</time>', moment.isoformat(), moment.strftime("%Y-%m-%d %H:%M UTC")
    )


@register.filter
def kwh(joules: float | None) -> str:
    """Measured energy (joules) in kWh, three decimals."""
    return "–" if joules is None else f"{joules / 3.6e6:,.3f}"


@register.filter
def gpu_time(gpu_seconds: float | None) -> str:
    """GPU-seconds in a unit that reads ("12 GPU-minutes"); "–" where not recorded."""
    return "–" if gpu_seconds is None else _gpu_time(gpu_seconds)


@register.filter
def runway(hours: float | None) -> str:
    """A runway in hours as people read it ("about 3 days", "more than a year")."""
    return "–" if hours is None else runway_text(hours)
