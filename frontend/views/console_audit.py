"""Console: the audit log with filters, and the same rows as CSV."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from accounts.audit_text import detail_fields, detail_text
from accounts.models import AuditEvent, Tenant, User
from accounts.selectors import audit_events
from frontend.access import admin_only, page
from frontend.csvstream import cell, csv_response


class AuditFilter(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.order_by("slug"), required=False, to_field_name="slug", empty_label="any"
    )
    actor = forms.CharField(required=False, max_length=150, label="Who (username)")
    action = forms.CharField(
        required=False, max_length=64, help_text='Exact, or a family ending in "." (ledger.)'
    )
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, label="To (inclusive)", widget=forms.DateInput(attrs={"type": "date"})
    )

    def clean_actor(self) -> User | None:
        name = self.cleaned_data.get("actor", "").strip()
        if not name:
            return None
        user = User.objects.filter(username=name).first()
        if user is None:
            raise forms.ValidationError(f"no user called {name!r}")
        return user


def _events(request: HttpRequest) -> tuple[AuditFilter, Any]:
    form = AuditFilter(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    qs = audit_events(
        tenant=f.get("tenant"),
        actor=f.get("actor"),
        action=f.get("action") or None,
        since=datetime.combine(f["since"], time.min, tzinfo=UTC) if f.get("since") else None,
        until=datetime.combine(f["until"] + timedelta(days=1), time.min, tzinfo=UTC)
        if f.get("until")
        else None,
    )
    return form, qs


@admin_only
def audit(request: HttpRequest) -> HttpResponse:
    form, qs = _events(request)
    query = request.GET.copy()
    query.pop("page", None)
    paged = Paginator(qs, 50).get_page(request.GET.get("page"))
    rows = [(event, detail_fields(event.detail, event.action)) for event in paged.object_list]
    return page(
        request,
        "frontend/console/audit.html",
        {"form": form, "page": paged, "rows": rows, "query": query.urlencode()},
    )


def _rows(qs: Any) -> Iterator[list[object]]:
    event: AuditEvent
    for event in qs.iterator(chunk_size=2000):
        yield [
            event.pk,
            event.created_at.isoformat(),
            event.actor.username if event.actor else "",
            event.tenant.slug if event.tenant else "",
            event.action,
            cell(detail_text(event.detail, event.action)),
            cell(json.dumps(event.detail, sort_keys=True)),
        ]


@admin_only
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    _form, qs = _events(request)
    # `detail` as people read it (credits, old → new); `detail_json` as stored, for scripts.
    header = ["id", "created_at", "actor", "tenant", "action", "detail", "detail_json"]
    return csv_response(header, _rows(qs), "audit.csv")
