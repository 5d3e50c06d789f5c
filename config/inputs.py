"""The input policy every API field follows (docs/reliability.md §Input policy).

One place decides what a number, an instant and a string may be, so that absurd input is refused with a 400
naming the field before it reaches Decimal arithmetic, datetime arithmetic or PostgreSQL:

- decimals: at most 40 characters, finite, at most `places` decimals and at most 10^18 in size (checked on the
  exponent, before any arithmetic, so "1e25" or "1e999999" never reaches `quantize` or `int`);
- instants: ISO 8601 dates or datetimes between 1970 and 9000 (naive = UTC), so that no offset or end-of-day
  step can overflow Python's datetime or PostgreSQL's timestamptz;
- strings: no NUL (PostgreSQL cannot store it) and no lone UTF-16 surrogate (it cannot be encoded as UTF-8).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from decimal import Context, Decimal, InvalidOperation

from django.utils.dateparse import parse_date, parse_datetime

DECIMAL_MAX_CHARS = 40
DECIMAL_MAX_EXPONENT = 18
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# NUL and the UTF-16 surrogate range: neither PostgreSQL nor UTF-8 can hold them.
FORBIDDEN_CHARS = re.compile("[\x00\ud800-\udfff]")


class InputError(ValueError):
    """A value outside the input policy; the message completes "<field> ..."."""


def parse_decimal(value: object, *, places: int, noun: str) -> Decimal:
    """A finite Decimal with at most `places` decimals and at most 10^18, from a string or JSON number."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"must be {noun}")
    text = str(value).strip()
    if len(text) > DECIMAL_MAX_CHARS:
        raise InputError(f"is too long to be {noun}")
    try:
        number = Decimal(text)
    except InvalidOperation as exc:
        raise InputError(f"must be {noun}") from exc
    if not number.is_finite():
        raise InputError("must be a finite number")
    if number.is_zero():
        return Decimal(0)
    if number.adjusted() > DECIMAL_MAX_EXPONENT:
        raise InputError(f"is too large (at most 10^{DECIMAL_MAX_EXPONENT})")
    if number.adjusted() < -places:
        raise InputError(f"has more than {places} decimals")
    # The exponent is bounded now, so this quantize can neither overflow nor lose digits silently.
    exact = number.quantize(
        Decimal(1).scaleb(-places), context=Context(prec=DECIMAL_MAX_EXPONENT + places + 2)
    )
    if exact != number:
        raise InputError(f"has more than {places} decimals")
    return number


def parse_instant(value: object, *, end_of_day: bool = False) -> datetime:
    """An aware UTC datetime from an ISO date or datetime. With end_of_day, the exclusive end of what was
    named: the day after a bare date, one microsecond after a datetime."""
    text = str(value).strip()
    try:
        day = parse_date(text) if len(text) == 10 else None
        moment = None if day else parse_datetime(text)
    except ValueError:
        day = moment = None
    if day is not None:
        moment = datetime.combine(day, time.min, tzinfo=UTC)
    elif moment is None:
        raise InputError("must be an ISO 8601 date or datetime, e.g. 2026-01-31T12:00:00Z")
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    # The bounds are checked on the naive wall time first, so the conversion to UTC cannot overflow.
    if not EARLIEST.replace(tzinfo=None) <= moment.replace(tzinfo=None) < LATEST.replace(tzinfo=None):
        raise InputError(f"must be between {EARLIEST.date()} and {LATEST.date()}")
    moment = moment.astimezone(UTC)
    if end_of_day:
        moment += timedelta(days=1) if day is not None else timedelta(microseconds=1)
    return moment


def check_text(value: str) -> None:
    """Refuse NUL and lone surrogates in a string."""
    found = FORBIDDEN_CHARS.search(value)
    if found is not None:
        char = found.group()
        raise InputError(
            "must not contain NUL characters" if char == "\x00" else "must not contain lone UTF-16 surrogates"
        )
