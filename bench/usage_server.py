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

from django.conf import settings
from django.core.wsgi import get_wsgi_application

MAX_BODY = 8 * 1024 * 1024  # decompressed

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings.ROOT_URLCONF = __name__
application = get_wsgi_application()  # sets Django up: what _routes imports needs the apps loaded


def _routes() -> tuple[bool, list[Any]]:
    """(whether the stand-in is served, this URLconf's patterns)."""
    from django.http import HttpResponse
    from django.urls import Resolver404, path, resolve
    from rest_framework.request import Request
    from rest_framework.response import Response

    import config.urls
    from nodeagent.api.agent import AgentView
    from nodeagent.api.errors import refused
    from nodeagent.errors import NodeError
    from nodeagent.services.usage import report_ingest
    from nodeagent.services.usage_parse import parse_leases, parse_samples

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
        resolve("/api/v1/agent/report", urlconf="config.urls")
        stand_in = False
    except Resolver404:
        stand_in = True
    extra = [path("api/v1/agent/report", BenchReportView.as_view())] if stand_in else []
    return stand_in, extra + list(config.urls.urlpatterns)


STAND_IN, urlpatterns = _routes()
