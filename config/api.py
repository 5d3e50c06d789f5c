"""API-wide conventions: one JSON error shape, bounded pagination."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


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
    response.data = body
    return response


def json_404(request: Any, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "not_found", "detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)


def json_500(request: Any) -> JsonResponse:
    return JsonResponse(
        {"error": "server_error", "detail": "Internal error; it has been logged."}, status=500
    )
