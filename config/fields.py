"""Serializer fields that take exactly what the API's schema says they take (docs/reliability.md §The schema).

Each states its rule once, as a regex its schema documents (config/schema.py puts it there) and the field
itself checks, so a client generated from /api/schema/ neither sends a value the API refuses nor finds a value
the schema forbids accepted. DRF's own fields are looser than their schema: a CharField takes the number 5 as
"5", a decimal field takes JSON numbers, blank means whatever `str.strip` strips.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any, TypeAlias, TypeVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from config.inputs import DECIMAL_MAX_CHARS, INSTANT_PATTERN, InputError, decimal_pattern, parse_instant
from config.parsers import JsonNumber

# Any DRF field, whatever its value types (the stubs make Field generic in four; DRF's class takes no
# subscript at runtime, hence the string).
AnyField: TypeAlias = "serializers.Field[Any, Any, Any, Any]"

# What a text field trims and what counts as blank: ASCII whitespace only, because Python's `str.strip` and
# ECMA's `\s` disagree about the rest (U+001C to U+001F, U+0085, U+FEFF).
SPACE = " \t\n\r\f\v"
# Free text as the schema documents it (`\u0000` reads the same in both regex dialects): no NUL anywhere
# (config/parsers and config/middleware refuse it in every body and query string: PostgreSQL cannot store it)
# and, unless blank is allowed, a character that is not blank. Where it is, the pattern still wants a
# character: drf-spectacular offers "" beside it (oneOf), and "" must not match both.
TEXT = r"^[^\u0000]*[^\u0000 \t\n\r\f\v][^\u0000]*$"
TEXT_OR_BLANK = r"^[^\u0000]+$"


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


class TextField(serializers.CharField):
    """A JSON string, never a number or a boolean. Unless allow_blank, it must hold a character other than
    ASCII whitespace (the schema's pattern says so); `max_length` counts the string as sent; `pattern`, if
    given, must match the whole string. What passes is trimmed of ASCII whitespace (unless trim_whitespace is
    False) and then meets the field's own validators (DRF's refuse NUL, which the parser refused already)."""

    def __init__(
        self,
        *,
        pattern: str | None = None,
        pattern_message: str = "is not in the form this field takes",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pattern = pattern  # with allow_blank, "" is taken besides what it matches
        # What config/schema.py documents: the whole-string pattern, or free text.
        self.schema_pattern = f"^(?:{pattern})$" if pattern else TEXT_OR_BLANK if self.allow_blank else TEXT
        self.pattern_message = pattern_message

    def run_validation(self, data: Any = empty) -> Any:
        is_empty, data = self.validate_empty_values(data)
        if is_empty:
            return data
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        if data == "" and self.allow_blank:
            return ""
        if not self.allow_blank and not data.strip(SPACE):
            self.fail("blank")
        if self.pattern is not None and not _compiled(self.pattern).fullmatch(data):
            raise serializers.ValidationError(self.pattern_message)
        value = data.strip(SPACE) if self.trim_whitespace else data
        self.run_validators(value)
        return value


# Generic in its value: each subclass turns the decimal into its own (micro-credits, seconds).
_Value = TypeVar("_Value")


# A string in responses; in requests, oneOf a string with its pattern or a number (config/schema.py).
@extend_schema_field(OpenApiTypes.STR)
class DecimalStringField(serializers.Field[_Value, object, str, object]):
    """A decimal number from `low` to `high` with at most `places` decimals, as a JSON string written plainly
    ("12.5": no sign, exponent, leading zero or spaces; the regex config.inputs.decimal_pattern builds, which
    the schema documents) or as a JSON number (12.5, 3, 1e2). A number is taken at the exact value of its
    text (config/parsers.JsonNumber keeps it), never through a float, and meets the same bounds; a number with
    more decimals than `places` (0.00000015 credits) is a 400, not a rounding. true, false, NaN and Infinity
    are a 400 naming the field. Gives a Decimal; subclasses turn it into what they store; responses give
    strings."""

    example = "12.5"

    def __init__(self, *, places: int, low: Decimal, high: Decimal, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.places, self.low, self.high = places, low, high

    def bounds(self) -> tuple[Decimal, Decimal]:
        return self.low, self.high

    @property
    def pattern(self) -> str:
        low, high = self.bounds()
        return _decimal_pattern(self.places, low, high)

    @property
    def schema_pattern(self) -> str:
        return f"^(?:{self.pattern})$"

    def number_schema(self) -> dict[str, Any]:
        """The JSON-number form in the schema: the same bounds, and multipleOf for the decimals."""
        low, high = self.bounds()
        return {
            "type": "number",
            "minimum": _json_number(low),
            "maximum": _json_number(high),
            "multipleOf": _json_number(Decimal(1).scaleb(-self.places)),
        }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            raise serializers.ValidationError(
                f'must be a number or a decimal string such as "{self.example}"'
            )
        if isinstance(data, int | float):
            return self.number(data)
        if not isinstance(data, str):
            raise serializers.ValidationError(
                f'must be a number or a decimal string such as "{self.example}"'
            )
        if not _compiled(self.pattern).fullmatch(data):
            raise serializers.ValidationError(self.explain(data))
        return Decimal(data)

    def number(self, data: int | float) -> Decimal:
        """A JSON number's exact value, within the bounds and places the string form has."""
        number = exact_number(data)
        if number is None:
            raise serializers.ValidationError("is out of range for a number")
        problem = self.out_of_bounds(number)
        if problem is None and decimal_places(number) > self.places:
            problem = self.too_many_places()
        if problem is not None:
            raise serializers.ValidationError(problem)
        # Bounded now (at most 10^9 with `places` decimals), so the quantize is exact; -0 becomes 0.
        return abs(number) if number.is_zero() else number.quantize(Decimal(1).scaleb(-self.places))

    def explain(self, text: str) -> str:
        """Why `text` does not match: the bound it misses where it is a plain decimal."""
        plain = re.fullmatch(r"(0|[1-9][0-9]*)(\.[0-9]+)?", text) and len(text) <= DECIMAL_MAX_CHARS
        if not plain:
            return (
                f'must be a decimal string such as "{self.example}": digits, then optionally a point and '
                f"at most {self.places} decimals"
            )
        number = Decimal(text)  # plain and short: it parses
        return self.out_of_bounds(number) or self.too_many_places()

    def out_of_bounds(self, number: Decimal) -> str | None:
        low, high = self.bounds()
        if number > high:
            return self.too_high(high)
        if number < low:
            return self.too_low(low)
        return None

    def too_high(self, high: Decimal) -> str:
        return f"must be at most {high}"

    def too_low(self, low: Decimal) -> str:
        return "must be positive" if low == Decimal(1).scaleb(-self.places) else f"must be at least {low}"

    def too_many_places(self) -> str:
        return f"has more than {self.places} decimals"


def exact_number(data: int | float) -> Decimal | None:
    """The exact value of a JSON number: an int as it is, a JsonNumber from its text. A plain float (from
    Python code, not a request) is read from its repr, the text a JSON encoder writes for it. None where the
    text is beyond what a Decimal holds (an exponent past 10^18 digits)."""
    if isinstance(data, int):
        return Decimal(data)
    text = data.text if isinstance(data, JsonNumber) else repr(data)
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def decimal_places(number: Decimal) -> int:
    """How many decimals the value needs (2.50 and 25e-1 need 1), read from its digits, without arithmetic:
    `number` may be 1e-999999999."""
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite
    significant = "".join(map(str, digits)).rstrip("0")
    if not significant:
        return 0
    return max(0, -(exponent + len(digits) - len(significant)))


def _json_number(value: Decimal) -> int | float:
    """A schema bound as JSON writes it: whole numbers as integers, the rest as the float whose shortest
    text is the decimal (0.0167, 1e-06)."""
    return int(value) if value == value.to_integral_value() else float(value)


@cache
def _decimal_pattern(places: int, low: Decimal, high: Decimal) -> str:
    return decimal_pattern(places=places, low=low, high=high)


@extend_schema_field(OpenApiTypes.STR)  # and INSTANT_PATTERN (config/schema.py)
class InstantField(serializers.Field[datetime, object, str, object]):
    """An ISO date or datetime (naive means UTC) matching config.inputs.INSTANT_PATTERN, which the schema
    documents. With end_of_day, a bare date means the end of that day."""

    schema_pattern = f"^(?:{INSTANT_PATTERN})$"

    def __init__(self, *, end_of_day: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.end_of_day = end_of_day

    def to_internal_value(self, data: Any) -> datetime:
        try:
            # `until` is inclusive of what it names; the selectors take an exclusive bound.
            return parse_instant(data, end_of_day=self.end_of_day)
        except InputError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()
