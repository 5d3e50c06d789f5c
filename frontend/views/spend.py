"""Spend: the ledger with filters, spend over time by GPU type and by job, and the same rows as CSV."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from config.money import format_fixed
from frontend.access import page, seat
from frontend.charts import Series, line_chart
from frontend.csvstream import cell, csv_response
from inventory.models import GpuType
from market.models import EntryKind
from market.selectors.spend import spend_by_day, spend_entries

PAGE_SIZE = 50
TOP_JOBS = 6


class SpendFilter(forms.Form):
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, label="To (inclusive)", widget=forms.DateInput(attrs={"type": "date"})
    )
    kind = forms.ChoiceField(required=False, choices=[("", "any"), *EntryKind.choices])
    job = forms.IntegerField(required=False, min_value=1, label="Job id")
    gpu_type = forms.ChoiceField(required=False, label="GPU type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = GpuType.objects.order_by("name").values_list("name", flat=True)
        gpu_type = cast(forms.ChoiceField, self.fields["gpu_type"])  # declared a ChoiceField just above
        gpu_type.choices = [("", "any"), *((n, n) for n in names)]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            self.add_error("until", "must not be before the start date")
        return data


def _entries(request: HttpRequest, slug: str) -> tuple[Any, SpendFilter, Any]:
    s = seat(request, slug)
    form = SpendFilter(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    since = datetime.combine(f["since"], time.min, tzinfo=UTC) if f.get("since") else None
    before = (
        datetime.combine(f["until"] + timedelta(days=1), time.min, tzinfo=UTC) if f.get("until") else None
    )
    qs = spend_entries(
        tenant=s.tenant,
        since=since,
        before=before,
        kind=f.get("kind") or None,
        job_id=f.get("job"),
        gpu_type=f.get("gpu_type") or None,
    )
    return s, form, qs


def _chart(qs: Any, by: str, title: str, label: Any) -> Any:
    days = spend_by_day(qs, by=by)
    ranked = sorted(days, key=lambda k: -sum(v for _, v in days[k]))
    series = [Series(label(k), [(d.timestamp(), v / 1e6) for d, v in days[k]]) for k in ranked[:TOP_JOBS]]
    return line_chart(series, title=title, y_unit="credits per day")


@login_required
def spend(request: HttpRequest, slug: str) -> HttpResponse:
    s, form, qs = _entries(request, slug)
    paged = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page(
        request,
        "frontend/spend.html",
        {
            "form": form,
            "page": paged,
            "query": query.urlencode(),
            "by_type": _chart(qs, "gpu_type_name", "Spend per day by GPU type", lambda k: k),
            "by_job": _chart(qs, "job_ref", f"Spend per day, top {TOP_JOBS} jobs", lambda k: f"job {k}"),
        },
        s,
    )


CSV_HEADER = [
    "id",
    "created_at",
    "kind",
    "key",
    "job",
    "gpu_type",
    "charged",
    "available_change",
    "held_change",
    "memo",
]


def _csv_rows(qs: Any) -> Iterator[list[object]]:
    entry: Any
    for entry in qs.iterator(chunk_size=2000):
        yield [
            entry.pk,
            entry.created_at.isoformat(),
            entry.kind,
            entry.key,
            entry.job_ref or "",
            entry.gpu_type_name or "",
            format_fixed(entry.charged, decimals=6),
            format_fixed(entry.available_change, decimals=6),
            format_fixed(entry.held_change, decimals=6),
            cell(entry.memo),
        ]


@login_required
def spend_csv(request: HttpRequest, slug: str) -> StreamingHttpResponse:
    """The filtered rows, streamed from a server-side cursor: a large range never sits in memory."""
    s, _form, qs = _entries(request, slug)
    return csv_response(CSV_HEADER, _csv_rows(qs.select_related(None)), f"spend-{s.tenant.slug}.csv")
