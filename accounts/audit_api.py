"""The audit log for platform admins: filters, pages of JSON, or every matching row as CSV.

CSV comes with `?format=csv` or `Accept: text/csv`; it streams the whole filtered log (no pages), so an
export of a year is not held in memory. Views parse, call the selector, serialize.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import caller, require_admin
from accounts.models import AuditEvent, Tenant, User
from accounts.selectors import audit_events
from config.api import Pagination, QuerySerializer
from config.fields import InstantField, TextField

CSV_COLUMNS = ["id", "created_at", "action", "actor", "tenant", "detail"]


class CSVRenderer(BaseRenderer):
    """Lets content negotiation pick CSV; the view streams the body itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        # Only errors reach here (the CSV body is streamed by the view): render them as JSON text.
        return json.dumps(data).encode()


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
    detail = serializers.JSONField(
        read_only=True, help_text='What changed; for policy changes {"field": [old, new]}.'
    )

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "action", "actor", "tenant", "detail"]
        read_only_fields = fields


class AuditFilterSerializer(QuerySerializer):
    action = TextField(
        required=False, max_length=64, help_text='e.g. "policy.update", or a prefix such as "ledger".'
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", queryset=Tenant.objects.all(), required=False, help_text="A tenant's slug."
    )
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", queryset=User.objects.all(), required=False, help_text="A user's username."
    )
    # The ledger's instant policy (calendar edges and offsets are a 400, not a 500).
    since = InstantField(required=False, help_text="ISO 8601 date or datetime; events at or after it.")
    until = InstantField(required=False, help_text="ISO 8601 date or datetime; events before it.")
    # Read by DRF's content negotiation; here so that `?format=` given empty is a 400 as for every filter,
    # not the JSON DRF would answer to it.
    format = serializers.ChoiceField(
        choices=["csv", "json"], required=False, help_text="csv: the whole log as CSV."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "since" in attrs and "until" in attrs and attrs["since"] >= attrs["until"]:
            raise serializers.ValidationError({"until": ["must be after since"]})
        return attrs


def _cell(value: object) -> str:
    """Text a spreadsheet shows as text: a leading =, +, - or @ would make it a formula."""
    text = "" if value is None else str(value)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@") else text


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_rows(events: Any) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for e in events.iterator(chunk_size=2000):
        yield writer.writerow(
            [
                e.pk,
                e.created_at.isoformat(),
                _cell(e.action),
                _cell(e.actor.username if e.actor else ""),
                _cell(e.tenant.slug if e.tenant else ""),
                json.dumps(e.detail, sort_keys=True),
            ]
        )


class AuditView(APIView):
    pagination_class = Pagination
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(
        parameters=[AuditFilterSerializer],
        responses=AuditEventSerializer(many=True),
        description="With `?format=csv` or `Accept: text/csv`: every matching event (no pages) as CSV, columns "
        + ", ".join(CSV_COLUMNS)
        + ".",
        summary="The audit log, newest first (platform admins; paginated, or CSV with ?format=csv)",
    )
    def get(self, request: Request) -> Response | StreamingHttpResponse:
        require_admin(caller(request))
        query = AuditFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        paginator = self.pagination_class()
        paginator.check_params(request)  # CSV has no pages, but the documented bounds hold for it too
        events = audit_events(**{k: v for k, v in query.validated_data.items() if k != "format"})
        if request.accepted_renderer.format == "csv":
            response = StreamingHttpResponse(_csv_rows(events), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = 'attachment; filename="audit.csv"'
            return response
        page = paginator.paginate_queryset(events, request, view=self)
        return paginator.get_paginated_response(AuditEventSerializer(page, many=True).data)

    def handle_exception(self, exc: Exception) -> Response:
        # An error is the API's JSON error whatever format was asked for: a CSV client gets a body it can read
        # and the schema's documented error type.
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response
