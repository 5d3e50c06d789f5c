"""The API's one request parser: JSON objects only, bounded in size, depth and content (docs/reliability.md).

Every API view parses its body here (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES), so no view meets a decoder's
RecursionError, a NaN, a string PostgreSQL cannot store, or a top-level list where it expects an object.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status

from config.inputs import InputError, check_text

# Deeper than any request this API takes (a job's bids are three levels down).
MAX_DEPTH = 16


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:20]} is out of range for a number")
    return number


def _invalid(path: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({path or "body": [message]})


def check_json(data: Any) -> None:
    """Walk the decoded body without recursion: depth, and every key and string against the input policy."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            try:
                check_text(value)
            except InputError as exc:
                raise _invalid(path, str(exc)) from exc
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise _invalid(path, f"is nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    try:
                        check_text(key)
                    except InputError as exc:
                        raise _invalid(path or "body", f"has a key that {exc}") from exc
                    child = f"{path}.{key}" if path else key
                else:
                    child = f"{path}[{key}]"
                stack.append((item, child, depth + 1))


class JSONParser(parsers.JSONParser):
    """A JSON object of at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes, at most MAX_DEPTH levels deep."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise BodyTooLarge(f"The request body is larger than {limit} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise exceptions.ParseError(f"body is not valid {encoding}") from exc
        try:
            data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
        except RecursionError as exc:
            raise _invalid("body", f"is nested deeper than {MAX_DEPTH} levels") from exc
        except ValueError as exc:  # JSONDecodeError, the 4300-digit integer limit, NaN, 1e999
            raise exceptions.ParseError(f"JSON parse error: {exc}") from exc
        if not isinstance(data, dict):
            raise _invalid("body", "must be a JSON object")
        check_json(data)
        return data
