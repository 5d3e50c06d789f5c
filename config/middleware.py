"""Request guards that apply before any view runs (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.request import RawPostDataException

from config import dbretry
from config.inputs import FORBIDDEN_CHARS


class Middleware:
    """A middleware that runs in its caller's mode: plain calls under WSGI, a coroutine under ASGI, so it
    adds no hand-off between the event loop and a thread (a sync-only middleware would make Django run the
    whole request below it, the agents' long poll included, on a thread). Subclasses say what happens before
    the view (`before`: a response ends the request there) and after it (`after`). Neither may touch the
    database."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self.before(request) or self.after(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]] = self.get_response
        return self.before(request) or self.after(request, await get_response(request))

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response


def _refuse(request: HttpRequest, field: str, message: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"error": "invalid", "detail": f"{field}: {message}", "fields": {field: [message]}}, status=400
        )
    return HttpResponseBadRequest(f"{field}: {message}", content_type="text/plain")


class InputGuardMiddleware(Middleware):
    """No NUL in the path, the query string or a portal form's fields: PostgreSQL cannot store or compare
    such a string, and no slug, name, memo or filter value may contain one. Refused here once rather than in
    every view, form and selector. (API bodies are JSON, refused by config/parsers.py.)"""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        if FORBIDDEN_CHARS.search(request.path):
            return _refuse(request, "path", "must not contain NUL characters")
        for key, values in request.GET.lists():
            if any(FORBIDDEN_CHARS.search(text) for text in [key, *values]):
                name = key if not FORBIDDEN_CHARS.search(key) else "query"
                return _refuse(request, name, "must not contain NUL characters")
        if request.method == "POST" and not request.path.startswith("/api/"):
            for key, values in request.POST.lists():
                if any(FORBIDDEN_CHARS.search(text) for text in [key, *values]):
                    name = key if not FORBIDDEN_CHARS.search(key) else "form"
                    return _refuse(request, name, "must not contain NUL characters")
        return None


class ContentSecurityPolicyMiddleware(Middleware):
    """Content-Security-Policy on every HTML page: scripts, styles and frames only from this origin, so an
    injected tag can neither run script nor send the admin session's pages elsewhere."""

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if response.get("Content-Type", "").startswith("text/html"):
            docs = request.path.startswith("/api/docs/")
            response.headers.setdefault("Content-Security-Policy", _docs_policy() if docs else POLICY)
        return response


POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


def _docs_policy() -> str:
    """Swagger UI starts itself with an inline script; its files come from wherever drf-spectacular is told
    to take them (installed static files, or a CDN named in SWAGGER_UI_DIST)."""
    from drf_spectacular.settings import spectacular_settings

    dist = str(spectacular_settings.SWAGGER_UI_DIST)
    origin = " " + "/".join(dist.split("/")[:3]) if dist.startswith("https://") else ""
    return (
        f"default-src 'self'; script-src 'self' 'unsafe-inline'{origin}; "
        f"style-src 'self' 'unsafe-inline'{origin}; img-src 'self' data:{origin}; "
        "object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
    )


class DatabaseConflictMiddleware(Middleware):
    """Every view runs in the database-conflict net (config/dbretry.py): a deadlock or serialization failure
    runs it again, and when the net gives up the client gets a 503 with Retry-After saying what happened,
    never a 500. Its process_view calls the view itself (Django then skips its own call), in the thread
    Django would call a sync view in. The agents' async command poll (a read) is left to Django."""

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        if iscoroutinefunction(view):
            return None
        kept = _keep_body(request)
        try:
            response: HttpResponse = dbretry.retrying(
                lambda: view(request, *args, **kwargs), where="request", retries=None if kept else 0
            )
        except dbretry.GaveUp as gave_up:
            return conflict_response(request, gave_up)
        return response


def _keep_body(request: HttpRequest) -> bool:
    """Read the body into memory before the first try, so that a second try's parser can read it again (a
    stream read once is gone); False if it cannot be kept, and then there is no second try. Only a body whose
    Content-Length is within DATA_UPLOAD_MAX_MEMORY_SIZE is read, as the parsers would read it: a larger one
    is theirs to refuse (413), and one without a length is never read whole here (DRF reads none)."""
    if request.method not in ("POST", "PUT", "PATCH", "DELETE") or hasattr(request, "_body"):
        return True
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    if length <= 0:
        return True
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and length > limit:
        return False
    try:
        request.body  # noqa: B018 - cached on the request
    except (RequestDataTooBig, RawPostDataException):  # a multipart form already parsed: kept as parsed
        return hasattr(request, "_post")
    return True


CONFLICT_RETRY_AFTER_S = 1


def conflict_body(gave_up: dbretry.GaveUp) -> dict[str, str]:
    """What the client is told when the net gives up: nothing of the request was saved, unless an earlier
    step committed (then the body says so: check its effect, or repeat it with its Idempotency-Key, which
    replays what was saved)."""
    why = f"it met concurrent writes ({dbretry.CONFLICTS[gave_up.sqlstate]}) on each of {gave_up.tries} tries"
    if gave_up.committed:
        return {
            "error": "database_conflict_partial",
            "detail": f"The request did not complete: {why}, after part of it was saved. Check its effect, "
            "or send it again with the same Idempotency-Key.",
        }
    return {
        "error": "database_conflict",
        "detail": f"The request did not happen: {why}, and nothing of it was saved. Send it again.",
    }


def conflict_response(request: HttpRequest, gave_up: dbretry.GaveUp) -> HttpResponse:
    """503 with Retry-After: JSON on the API, text on the portal."""
    body, headers = conflict_body(gave_up), {"Retry-After": str(CONFLICT_RETRY_AFTER_S)}
    if request.path.startswith("/api/"):
        return JsonResponse(body, status=503, headers=headers)
    return HttpResponse(body["detail"], status=503, headers=headers, content_type="text/plain; charset=utf-8")
