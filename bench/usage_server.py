"""bench/usage.py's web process: the project's WSGI application, plus, only where the project has no
`POST /api/v1/agent/report` yet (protocol 2's view is another branch's, issue 36), a minimal stand-in doing
that view's usage half: authenticate the node, gunzip (capped), parse the JSON, `parse_samples`,
`parse_leases`, `report_ingest`, answer. Not product code: gunicorn loads it from bench/ only."""

from __future__ import annotations

import gzip
import io
import json
import os
from datetime import datetime
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings  # noqa: E402

settings.ROOT_URLCONF = __name__

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import Resolver404, path, resolve  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402

import config.urls  # noqa: E402
from nodeagent.api.agent import AgentView  # noqa: E402
from nodeagent.api.errors import refused  # noqa: E402
from nodeagent.errors import NodeError  # noqa: E402
from nodeagent.services.usage import report_ingest  # noqa: E402
from nodeagent.services.usage_parse import parse_leases, parse_samples  # noqa: E402

MAX_BODY = 8 * 1024 * 1024  # decompressed


class BenchReportView(AgentView):
    parser_classes: list[Any] = []  # the body is read raw: gzip first

    def post(self, request: Request) -> Response | HttpResponse:
        node = self.node(request)
        raw = request._request.body
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return HttpResponse(status=413)
        body = json.loads(raw)
        try:
            samples = parse_samples(body["usage"]) if body.get("usage") is not None else None
            leases = parse_leases(body.get("leases"))
        except NodeError as exc:
            raise refused(exc) from exc
        report_ingest(
            node_id=node.pk,
            boot_epoch=body["boot_epoch"],
            seq=body["seq"],
            sent_at=datetime.fromisoformat(body["sent_at"]),
            samples=samples,
            leases=leases,
        )
        return Response({"acked": body["seq"]})


try:
    resolve("/api/v1/agent/report", urlconf=config.urls)
    STAND_IN = False
except Resolver404:
    STAND_IN = True

urlpatterns = ([path("api/v1/agent/report", BenchReportView.as_view())] if STAND_IN else []) + list(
    config.urls.urlpatterns
)
application = get_wsgi_application()
