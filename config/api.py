"""API-wide conventions: one JSON error shape, bounded and validated pagination, strict query parameters."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import (
    DisallowedHost,
    PermissionDenied,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import Http404, JsonResponse
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class Pagination(PageNumberPagination):
    """`page` from 1 and `page_size` from 1 to 500; anything else is a 400 naming the parameter (DRF would
    answer 404 for page=0 and quietly ignore a bad page_size). A page past the last one is a 404."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"]["maximum"] = self.max_page_size
        return parameters

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any] | None:
        for name, top in (("page", None), (self.page_size_query_param, self.max_page_size)):
            _positive_param(request.query_params, name, top)
        return super().paginate_queryset(queryset, request, view)


def _positive_param(params: Any, name: str, top: int | None) -> None:
    if name not in params:
        return
    text = params[name]
    if text == "last" and name == "page":
        return
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise exceptions.ValidationError({name: ["must be a whole number from 1"]})
    if top is not None and int(text) > top:
        raise exceptions.ValidationError({name: [f"must be at most {top}"]})


class QuerySerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Base of every list filter: a parameter given empty (`?gpu_type=`) is a 400 naming it, not silently
    dropped as DRF does for optional fields read from a query string."""

    def to_internal_value(self, data: Any) -> Any:
        blank = {
            name: ["must not be empty; leave the parameter out instead"]
            for name in self.fields
            if hasattr(data, "getlist") and name in data and any(v.strip() == "" for v in data.getlist(name))
        }
        if blank:
            raise exceptions.ValidationError(blank)
        return super().to_internal_value(data)


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Field errors as {"field.sub": ["message", ...]} so a client can name the culprit."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            # DRF 3.18 reports errors inside a list as {index: errors}: name them like list items.
            name = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else key
            out.update(flatten_errors(value, name))
        return out
    if isinstance(detail, list) and detail and all(isinstance(d, dict | list) for d in detail):
        out = {}
        for i, value in enumerate(detail):
            out.update(flatten_errors(value, f"{prefix}[{i}]"))
        return out
    messages = [str(d) for d in detail] if isinstance(detail, list) else [str(detail)]
    return {prefix or "non_field_errors": messages}


_REQUEST_PART = {"ParseError": "body", "BodyTooLarge": "body", "UnsupportedMediaType": "Content-Type"}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every error is {"error": code, "detail": text[, "fields": {...}]}."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        first = next(iter(fields.items()))
        body: dict[str, Any] = {
            "error": "invalid",
            "detail": f"{first[0]}: {first[1][0]}",
            "fields": fields,
        }
    else:
        code = exc.get_codes() if isinstance(exc, exceptions.APIException) else "error"
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        body = {"error": code if isinstance(code, str) else "error", "detail": str(detail)}
        # Errors about the request as a whole still name what was wrong with it.
        field = _REQUEST_PART.get(type(exc).__name__)
        if field is not None:
            body |= {"detail": f"{field}: {detail}", "fields": {field: [str(detail)]}}
    response.data = body
    return response


def json_404(request: Any, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "not_found", "detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)


def json_400(request: Any, exception: Exception | None = None) -> JsonResponse:
    """What Django itself refuses before a view runs (SuspiciousOperation), in the API's shape."""
    if isinstance(exception, RequestDataTooBig):
        message, field, code = "is larger than the server accepts", "body", 413
    elif isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        message, field, code = "has too many fields", "body", 400
    elif isinstance(exception, DisallowedHost):
        message, field, code = "is not a host this server answers for", "Host", 400
    else:
        message, field, code = "was refused", "request", 400
    error = "too_large" if code == 413 else "bad_request"
    return JsonResponse(
        {"error": error, "detail": f"{field}: {message}", "fields": {field: [message]}}, status=code
    )


def json_403(request: Any, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "permission_denied", "detail": "Forbidden."}, status=403)


def json_500(request: Any) -> JsonResponse:
    return JsonResponse(
        {"error": "server_error", "detail": "Internal error; it has been logged."}, status=500
    )


ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "A code: invalid, not_found, key_conflict, ..."},
        "detail": {"type": "string"},
        "fields": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "description": "For invalid input: each offending field (or body, a header, a query parameter).",
        },
    },
    "required": ["error", "detail"],
}
_ERRORS = {
    "400": "Invalid input: `fields` names each culprit.",
    "401": "No credentials, or a token that is invalid or revoked.",
    "403": "Signed in, but without the role this needs.",
    "404": "No such object, or one outside the caller's tenants.",
    "429": "Rate limit reached; see Retry-After.",
}
_WRITE_ERRORS = {
    "409": "Refused in the current state (key reused, not pending, insufficient funds, ...).",
    "413": "The body is larger than the server accepts.",
    "415": "The body is not JSON.",
}


def schema_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation documents the errors every operation can give
    (400, 401, 403, 404, 429; writes also 409, 413, 415) with the one error shape, keeping any description
    a view gave its own; string query parameters and headers are documented as non-empty."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for parameter in operation.get("parameters", []):
                # An empty query parameter or header is refused (QuerySerializer), so say so.
                if parameter.get("in") in ("query", "header") and parameter["schema"].get("type") == "string":
                    parameter["schema"].setdefault("minLength", 1)
            errors = _ERRORS | (_WRITE_ERRORS if method != "get" else {})
            responses = operation.setdefault("responses", {})
            for code, description in errors.items():
                response = responses.setdefault(code, {"description": description})
                response.setdefault("content", body)
    return result
