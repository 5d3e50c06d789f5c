"""API-wide conventions: one JSON error shape, bounded and validated pagination, strict query parameters."""

from __future__ import annotations

from collections.abc import Mapping
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
from rest_framework.fields import empty
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config import dbretry
from config.fields import SPACE, TEXT, AnyField
from config.middleware import CONFLICT_RETRY_AFTER_S, conflict_body


class Pagination(PageNumberPagination):
    """`page` from 1 to 999,999,999 and `page_size` from 1 to 500, as the schema says; anything else is a 400
    naming the parameter (DRF would answer 404 for page=0, quietly ignore a bad page_size, and take
    page=last, which the schema cannot call an integer). A page past the last one is a 404."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    max_page = 999_999_999
    last_page_strings = ()

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            parameter["schema"]["maximum"] = (
                self.max_page_size if parameter["name"] == self.page_size_query_param else self.max_page
            )
        return parameters

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any] | None:
        self.check_params(request)
        return super().paginate_queryset(queryset, request, view)

    def check_params(self, request: Any) -> None:
        """The page parameters as documented; also for a view that answers without pages (the audit CSV)."""
        for name, top in (("page", self.max_page), (self.page_size_query_param, self.max_page_size)):
            _positive_param(request.query_params, name, top)


def _positive_param(params: Any, name: str, top: int) -> None:
    if name not in params:
        return
    text = params[name]
    digits = text.lstrip("0")  # bounded before int(): a million digits is refused as too large, unparsed
    if not (text.isascii() and text.isdigit()) or not digits:
        raise exceptions.ValidationError({name: ["must be a whole number from 1"]})
    if len(digits) > len(str(top)) or int(digits) > top:
        raise exceptions.ValidationError({name: [f"must be at most {top:,}"]})


class QuerySerializer(serializers.Serializer[object]):
    """Base of every list filter: a parameter given empty (`?gpu_type=`) is a 400 naming it, not silently
    dropped as DRF does for optional fields read from a query string."""

    def to_internal_value(self, data: Any) -> Any:
        blank = {
            name: ["must not be empty; leave the parameter out instead"]
            for name, _ in self.fields.items()  # the stubs type iterating a BindingDict as its fields, not its names
            if hasattr(data, "getlist")
            and name in data
            and any(not v.strip(SPACE) for v in data.getlist(name))
        }
        if blank:
            raise exceptions.ValidationError(blank)
        return super().to_internal_value(data)


# Base of every JSON request body (a comment, not a docstring: the schema would show a docstring as the
# description of every body that has none of its own). Each field takes only the JSON type its schema
# documents, where DRF would take "5" for an integer, 0 for false, the number 5 for a name and "" for no
# related object. A name that is no writable field is a 400 naming it (a misspelt setting, or a job's
# `max_hour` for `max_hours`, must not look like a request that did what it said; issue 37 §5), and the schema
# says additionalProperties: false (config/schema.py). Every request body of the API is one of these; only the
# node agents' protocol (nodeagent/api/serializers.py) takes fields it does not know, so that a newer agent can
# talk to an older server. The portal checks its forms with the same serializers: with context {"form": True} the
# values are form text, so their JSON types are not checked (DRF's fields parse "2" as a number, as a form
# needs).
class BodySerializer(serializers.Serializer[object]):
    refuse_unknown = True
    unknown_message = "is not a field of this request"

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping) and not self.context.get("form"):
            # By name: a bound field's own field_name is typed optional.
            writable = {name: field for name, field in self.fields.items() if not field.read_only}
            errors: dict[str, Any] = {
                name: problem
                for name, field in writable.items()
                if (problem := json_type_problem(field, field.get_value(data))) is not None
            }
            if self.refuse_unknown:
                errors |= {name: [self.unknown_message] for name in sorted(set(data) - set(writable))}
            if errors:
                raise exceptions.ValidationError(errors)
        return super().to_internal_value(data)


class NoBodySerializer(BodySerializer):
    """The body of a write that takes none (cancel, lift, drain, shadow start): empty, or `{}`."""

    unknown_message = "is not a field of this request: it takes no body"


def no_body(request: Any) -> None:
    """Parse the body of a write that takes none, like any other (a bad one is a 400), and refuse any field
    in it by name rather than ignoring what the client meant."""
    NoBodySerializer(data=request.data).is_valid(raise_exception=True)


def json_type_problem(field: AnyField, value: Any) -> Any:
    """Why `value` is not of the JSON type `field` documents, as DRF error detail (a list of messages, or
    per key or index for objects and lists), or None. Absent and null are the field's to judge; fields of the
    API's own types (config/fields.py, lists of objects) check their input themselves."""
    if value is empty or value is None:
        return None
    if isinstance(field, serializers.Serializer) and not isinstance(value, Mapping):
        return ["must be an object"]  # DRF would say so under `field.non_field_errors`
    if isinstance(field, serializers.DictField | serializers.ListField):
        return _container_problem(field, value)
    message = None
    if isinstance(field, serializers.BooleanField):
        message = None if isinstance(value, bool) else "must be true or false"
    elif isinstance(field, serializers.IntegerField):
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        message = None if whole and not isinstance(value, bool) else "must be a whole number"
    elif isinstance(field, serializers.FloatField):
        message = (
            None if isinstance(value, int | float) and not isinstance(value, bool) else "must be a number"
        )
    elif isinstance(field, serializers.CharField | serializers.SlugRelatedField | serializers.ChoiceField):
        if not isinstance(value, str):
            message = "must be a string"
        elif value == "" and isinstance(field, serializers.SlugRelatedField):
            message = "must not be empty"
    return [message] if message else None


def _container_problem(field: serializers.DictField | serializers.ListField, value: Any) -> Any:
    if isinstance(field, serializers.DictField):
        if not isinstance(value, dict):
            return ["must be an object"]
        items = list(value.items())
    else:
        if not isinstance(value, list):
            return ["must be a list"]
        items = list(enumerate(value))
    problems = {key: p for key, item in items if (p := json_type_problem(field.child, item)) is not None}
    return problems or None


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
    state = dbretry.conflict_of(exc)
    if state and not dbretry.active():  # inside the net it propagates, to be retried (config/dbretry.py)
        gave_up = dbretry.GaveUp(state, tries=1, committed=False)  # outside the net: only reads
        return Response(
            conflict_body(gave_up), status=503, headers={"Retry-After": str(CONFLICT_RETRY_AFTER_S)}
        )
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
        elif isinstance(
            named := getattr(exc, "field", None), str
        ):  # a refusal about one input (a reused key)
            body["fields"] = {named: [str(detail)]}
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
        "error": {"type": "string", "description": "A code: invalid, not_found, idempotency_key_reused, ..."},
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
    "503": "Met concurrent writes on every try and did not happen (`database_conflict`); send it again after "
    "Retry-After.",
}


def schema_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation documents the errors every operation can give
    (400, 401, 403, 404, 429; writes also 409, 413, 415, 503) with the one error shape, keeping any description
    a view gave its own; string query parameters and headers are documented as non-empty and, where nothing
    narrower is said of them, as not blank (QuerySerializer refuses both)."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for parameter in operation.get("parameters", []):
                # An empty query parameter or header is refused (QuerySerializer), so say so.
                schema = parameter["schema"]
                if parameter.get("in") in ("query", "header") and schema.get("type") == "string":
                    schema.setdefault("minLength", 1)
                    if not {"enum", "format", "pattern"} & set(schema):
                        schema["pattern"] = TEXT
            errors = _ERRORS | (_WRITE_ERRORS if method != "get" else {})
            responses = operation.setdefault("responses", {})
            for code, description in errors.items():
                response = responses.setdefault(code, {"description": description})
                response.setdefault("content", body)
    return result


LENIENT_PATHS = ("/api/v1/agent/",)  # the agents' protocol accepts fields it does not know (a newer agent)


def schema_closed_request_bodies(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every JSON request body (BodySerializer refuses fields it does not
    take, with a 400 naming them) says `additionalProperties: false`, and so do the objects nested in it, so a
    client generated from the schema never sends what the API refuses. The agents' protocol stays open."""
    schemas = result.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def close(schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen and name in schemas:
                seen.add(name)
                close(schemas[name])
            return
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
            for sub in schema["properties"].values():
                close(sub)
        close(schema.get("items"))
        for key in ("allOf", "oneOf", "anyOf"):
            for sub in schema.get(key, []):
                close(sub)

    for path, operations in result.get("paths", {}).items():
        if path.startswith(LENIENT_PATHS):
            continue
        for method, operation in operations.items():
            if method in ("post", "put", "patch"):
                content = operation.get("requestBody", {}).get("content", {})
                close(content.get("application/json", {}).get("schema"))
    return result
