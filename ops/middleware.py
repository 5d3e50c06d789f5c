"""One access line and the request metrics per HTTP request, under a request id the caller may supply.

A client or proxy may send `X-Request-ID` (up to 128 characters of letters, digits, `.`, `_`, `-`, `:`);
anything else is replaced by a fresh id, so a hostile value cannot forge or break log lines. The id goes back in
the response header and onto every line logged while the request is handled, and into Celery tasks it sends.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty

from config import metrics
from config.logs import bind
from config.middleware import Middleware

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


class RequestLogMiddleware(Middleware):
    """Outermost: its clock and its request id cover everything the other middleware and the view do."""

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        with self._bound(request) as done:
            return done(self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        with self._bound(request) as done:
            return done(await self.get_response(request))

    @contextlib.contextmanager
    def _bound(self, request: HttpRequest) -> Iterator[Callable[[HttpResponse], HttpResponse]]:
        request_id = request_id_of(request)
        request.request_id = request_id  # type: ignore[attr-defined]  # an attribute this middleware adds to the request
        started = time.perf_counter()
        with bind(request_id=request_id):
            yield lambda response: _logged(request, response, request_id, time.perf_counter() - started)


def _logged(request: HttpRequest, response: HttpResponse, request_id: str, elapsed: float) -> HttpResponse:
    route = route_of(request)
    metrics.http_request(
        route=route, method=request.method or "", status=response.status_code, seconds=elapsed
    )
    user = _user_looked_up(request)
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


def _user_looked_up(request: HttpRequest) -> Any:
    """The user if the request already looked it up: looking it up here would read the session from the
    database, which an async request may not do in the event loop (and a request that never needed the
    user need not pay for it)."""
    user = getattr(request, "user", None)
    if isinstance(user, SimpleLazyObject) and user._wrapped is empty:  # type: ignore[attr-defined]  # SimpleLazyObject's private _wrapped, to tell an unevaluated user
        return None
    return user
