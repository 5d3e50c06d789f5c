"""The API's one request parser: JSON objects only, bounded in size, depth and content (docs/reliability.md).

Every API view parses its body here (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES), so no view meets a decoder's
RecursionError, a NaN, a string PostgreSQL cannot store, or a top-level list where it expects an object.

A JSON number with a point or an exponent becomes a `JsonNumber`: a float (what every other field and the
usage reports compute with) that keeps the number's text, so that the decimal fields (config/fields.py) take
the exact value the client wrote, never the float's approximation of it.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status

from config.inputs import DECIMAL_MAX_CHARS, InputError, check_text

# Deeper than any request this API takes (a job's bids are three levels down).
MAX_DEPTH = 16


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class JsonNumber(float):
    """A JSON number with a fraction or exponent, as a float that remembers its text ("2.50", "1e2")."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __getnewargs__(self) -> tuple[str]:  # type: ignore[override]  # copies and pickles keep the text
        return (self.text,)


def canonical_json(data: Any) -> str:
    """A parsed body as one text per JSON value (the idempotency digest's, config/idempotency.py): keys sorted,
    no spaces, and every number written as its exact value, so 3, 3.0 and 3e0 read the same (and as they
    always did: integers plainly, 2.5 as "2.5") while "3", a string, stays another value. Bodies are at most
    MAX_DEPTH deep (the parser checked), so the recursion is bounded."""
    if isinstance(data, dict):
        items = sorted(data.items())
        return "{" + ",".join(f"{_string(key)}:{canonical_json(value)}" for key, value in items) + "}"
    if isinstance(data, list):
        return "[" + ",".join(canonical_json(item) for item in data) + "]"
    if isinstance(data, int | float) and not isinstance(data, bool):
        return _number_text(data)
    # strings, true, false, null; a service's own value (a Decimal in a proposed snapshot) by its text
    return json.dumps(data, ensure_ascii=False, default=str)


def _string(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _number_text(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    text = value.text if isinstance(value, JsonNumber) else repr(value)
    try:
        number = Decimal(text)
    except InvalidOperation:  # an exponent past what a Decimal holds: its text is the best name it has
        return text
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite: check_json refused the rest
    written = "".join(map(str, digits))
    significant = written.rstrip("0")
    if not significant:
        return "0"
    exponent += len(written) - len(significant)
    if (
        -DECIMAL_MAX_CHARS <= exponent <= DECIMAL_MAX_CHARS
    ):  # plainly, as a person (and the old digest) writes it
        return format(Decimal((sign, tuple(map(int, significant)), exponent)), "f")
    return f"{'-' if sign else ''}{significant}e{exponent}"  # 1e-999999999 without a billion zeros


class _Constant(str):
    """NaN, Infinity or -Infinity, which JSON does not have: check_json refuses it naming the field."""


def _invalid(path: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({path or "body": [message]})


def check_json(data: Any) -> None:
    """Walk the decoded body without recursion: depth, every key and string against the input policy, and
    every number finite (NaN, Infinity and 1e400 are a 400 naming the field that holds them)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, _Constant):
            raise _invalid(path, f"{value} is not a JSON number")
        if isinstance(value, float) and not math.isfinite(value):
            text = value.text if isinstance(value, JsonNumber) else str(value)
            raise _invalid(path, f"{text[:20]} is out of range for a number")
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
    """A JSON object of at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes, at most MAX_DEPTH levels deep; numbers with
    a fraction or exponent as JsonNumber, so that amounts keep their exact text."""

    number: Callable[[str], float] = JsonNumber

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise BodyTooLarge(f"The request body is larger than {limit} bytes.")
        return self.parse_bytes(self.decoded(raw, parser_context), parser_context)

    def decoded(self, raw: bytes, parser_context: Any) -> bytes:
        """The body as JSON bytes: a subclass that takes compressed bodies decompresses here."""
        return raw

    def parse_bytes(self, raw: bytes, parser_context: Any) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise exceptions.ParseError(f"body is not valid {encoding}") from exc
        try:
            data = json.loads(text, parse_constant=_Constant, parse_float=self.number)
        except RecursionError as exc:
            raise _invalid("body", f"is nested deeper than {MAX_DEPTH} levels") from exc
        except ValueError as exc:  # JSONDecodeError, the 4300-digit integer limit
            raise exceptions.ParseError(f"JSON parse error: {exc}") from exc
        if not isinstance(data, dict):
            raise _invalid("body", "must be a JSON object")
        check_json(data)
        return data


class MeasurementJSONParser(JSONParser):
    """The node agents' bodies (nodeagent/api/agent.AgentView): measurements, never amounts, so numbers are
    plain floats, which usage parsing checks for by exact type (`type(x) is float`) and at its rate wants."""

    number = float


class AgentJSONParser(MeasurementJSONParser):
    """The agents' bodies, gzip-compressed or not (`Content-Encoding: gzip`, docs/agent.md §Protocol 2). The
    compressed body is bounded as any body is (DATA_UPLOAD_MAX_MEMORY_SIZE); what it inflates to is bounded by
    AGENT_BODY_MAX_BYTES, checked while inflating, so a small bomb is refused (413) without ever being
    inflated whole."""

    def decoded(self, raw: bytes, parser_context: Any) -> bytes:
        request = (parser_context or {}).get("request")
        coding = (
            (request.META.get("HTTP_CONTENT_ENCODING", "") if request is not None else "").strip().lower()
        )
        if coding in ("", "identity"):
            return raw
        if coding != "gzip":
            raise exceptions.ValidationError(
                {"Content-Encoding": [f"{coding[:40]!r} is not supported: gzip or none"]}
            )
        cap = settings.AGENT_BODY_MAX_BYTES
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # the gzip wrapper, as the agent writes it
        try:
            body = inflate.decompress(raw, cap + 1)
        except zlib.error as exc:
            raise exceptions.ParseError(f"the gzip body cannot be decompressed: {exc}") from exc
        if len(body) > cap:
            raise BodyTooLarge(f"The request body decompresses to more than {cap} bytes.")
        if not inflate.eof:
            raise exceptions.ParseError("the gzip body is truncated")
        return body
