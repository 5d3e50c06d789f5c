"""One access line and the request metrics per HTTP request, under a request id the caller may supply.

A client or proxy may send `X-Request-ID` (up to 128 characters of letters, digits, `.`, `_`, `-`, `:`);
anything else is replaced by a fresh id, so a hostile value cannot forge or break log lines. The id goes back in
the response header and onto every line logged while the request is handled, and into Celery tasks it sends.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ops import metrics
from ops.logs import bind

log = logging.getLogger("gpumarket.access")

HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def request_id_of(request: HttpRequest) -> str:
    given = request.headers.get(HEADER, "")
    return given if _VALID_ID.match(given) else uuid.uuid4().hex


def route_of(request: HttpRequest) -> str:
    """The URL pattern's name: bounded, unlike the path (which holds ids and slugs)."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match.route or "unnamed"


class RequestLogMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_of(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        started = time.perf_counter()
        with bind(request_id=request_id):
            response = self.get_response(request)
            elapsed = time.perf_counter() - started
            route = route_of(request)
            metrics.http_request(
                route=route, method=request.method or "", status=response.status_code, seconds=elapsed
            )
            user = getattr(request, "user", None)
            log.info(
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(elapsed * 1000, 1),
                    "user": user.pk if user is not None and user.is_authenticated else None,
                },
            )
        response[HEADER] = request_id
        return response
