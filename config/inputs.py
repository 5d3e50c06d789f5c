"""The input policy every API field follows (docs/reliability.md §Input policy).

One place decides what a number, an instant and a string may be, so that absurd input is refused with a 400
naming the field before it reaches Decimal arithmetic, datetime arithmetic or PostgreSQL:

- decimals: at most 40 characters, finite, at most `places` decimals and at most 10^18 in size (checked on the
  exponent, before any arithmetic, so "1e25" or "1e999999" never reaches `quantize` or `int`); the API takes
  them as strings matching `decimal_pattern`, which its schema documents;
- instants: ISO 8601 dates or datetimes from 1970 to 8999 (naive = UTC) matching INSTANT_PATTERN, so that
  no offset or end-of-day step can overflow Python's datetime or PostgreSQL's timestamptz;
- strings: no NUL (PostgreSQL cannot store it) and no lone UTF-16 surrogate (it cannot be encoded as UTF-8).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from decimal import Context, Decimal, InvalidOperation

from django.utils.dateparse import parse_date, parse_datetime

DECIMAL_MAX_CHARS = 40
DECIMAL_MAX_EXPONENT = 18
# NUL and the UTF-16 surrogate range: neither PostgreSQL nor UTF-8 can hold them.
FORBIDDEN_CHARS = re.compile("[\x00\ud800-\udfff]")


# The patterns below are written for both Python's `re` and the ECMA 262 regexes an OpenAPI schema's `pattern`
# means: ASCII classes only (no \d or \s, which differ between the two) and no lookaround. Each is the body
# of a whole-string match: Python checks it with `fullmatch`, the schema states it as `^(?:...)$`.

_YEAR = r"19[7-9][0-9]|[2-8][0-9]{3}"  # 1970 to 8999
# Leap years of that range: divisible by 4, and by 400 where they end in 00.
_LEAP_YEAR = (
    r"19(?:7[26]|8[048]|9[26])|[2-8][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00"
)
_MONTH_DAY = (
    r"(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8])"
)
_DATE = f"(?:{_YEAR})-(?:{_MONTH_DAY})|(?:{_LEAP_YEAR})-02-29"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
_OFFSET = r"Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?"
# A date, or a date and a time with an optional UTC offset (none means UTC): 2026-01-31, 2026-01-31T12:00,
# 2026-01-31 12:00:00.5+02:00. The years stop at 8999 so that no offset or end-of-day step can overflow
# Python's datetime or PostgreSQL's timestamptz, and the calendar is in the pattern (no 2026-02-29), so every
# value that matches is a real instant.
INSTANT_PATTERN = f"(?:{_DATE})(?:[T ]{_TIME}(?:{_OFFSET})?)?"
_INSTANT = re.compile(INSTANT_PATTERN)


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


def decimal_pattern(*, places: int, low: Decimal, high: Decimal) -> str:
    """The decimal strings from `low` to `high` with at most `places` decimals, without sign, exponent or
    leading zero ("0.5", "12", "12.50"), as a regex body (see above). The bounds are in the pattern, so a
    client generated from the schema sends only values the API takes."""
    scale = 10**places
    lo, hi = low * scale, high * scale
    if lo != int(lo) or hi != int(hi) or not 0 <= lo <= hi:
        raise ValueError("bounds must be non-negative, ordered and have at most `places` decimals")
    (lo_int, lo_frac), (hi_int, hi_frac) = divmod(int(lo), scale), divmod(int(hi), scale)
    if lo_int == hi_int:
        return _fraction_range(lo_int, lo_frac, hi_frac, places)
    # Whole numbers whose every fraction is in range go together: "1 to 167, any decimals".
    first, last = lo_int + (lo_frac > 0), hi_int - (hi_frac < scale - 1)
    branches = [_fraction_range(lo_int, lo_frac, scale - 1, places)] if first > lo_int else []
    if first <= last:
        branches.append(f"{_group(_int_range(first, last))}(?:\\.[0-9]{{1,{places}}})?")
    if last < hi_int:
        branches.append(_fraction_range(hi_int, 0, hi_frac, places))
    return "|".join(branches)


def _fraction_range(whole: int, low: int, high: int, places: int) -> str:
    """`whole` and a fraction of up to `places` digits whose value, in units of 10^-places, is from `low` to
    `high` (k digits stand for themselves times 10^(places - k); no fraction stands for 0)."""
    fractions = []
    for digits in range(1, places + 1):
        unit = 10 ** (places - digits)
        first, last = -(-low // unit), high // unit
        if first <= last:
            fractions.append(_same_length(f"{first:0{digits}d}", f"{last:0{digits}d}"))
    if fractions == [f"[0-9]{_count(n)}" for n in range(1, places + 1)]:
        fractions = [f"[0-9]{{1,{places}}}"]
    elif fractions == ["0" * n for n in range(1, places + 1)]:
        fractions = [f"0{{1,{places}}}"]
    fraction = f"\\.{_group('|'.join(fractions))}"
    return f"{whole}(?:{fraction})?" if low == 0 else f"{whole}{fraction}"


def _int_range(low: int, high: int) -> str:
    """Whole numbers from `low` to `high` without leading zeros."""
    parts = []
    for length in range(len(str(low)), len(str(high)) + 1):
        first, last = max(low, 10 ** (length - 1) if length > 1 else 0), min(high, 10**length - 1)
        parts.append(_same_length(str(first), str(last)))
    # Runs of whole lengths ("[1-9]", "[1-9][0-9]", "[1-9][0-9]{2}") read better as one: "[1-9][0-9]{0,2}".
    full = [f"[1-9][0-9]{_count(n)}" if n else "[1-9]" for n in range(len(str(high)))]
    runs = [n for n, part in enumerate(full) if part in parts]
    if len(runs) > 1 and runs == list(range(runs[0], runs[-1] + 1)):
        merged = f"[1-9][0-9]{{{runs[0]},{runs[-1]}}}"
        parts = [part for part in parts if part not in full] + [merged]
    return "|".join(parts)


def _same_length(low: str, high: str) -> str:
    """Strings of len(low) == len(high) digits from `low` to `high` (leading zeros count as digits here)."""
    if low == high:
        return low
    rest = len(low) - 1
    tail = f"[0-9]{_count(rest)}" if rest else ""
    if low[0] == high[0]:
        return low[0] + _group(_same_length(low[1:], high[1:]))
    parts = []
    start, end = int(low[0]), int(high[0])
    if low[1:] != "0" * rest:  # the first digit's range starts part-way
        parts.append(low[0] + _group(_same_length(low[1:], "9" * rest)))
        start += 1
    if high[1:] != "9" * rest:  # and ends part-way
        end -= 1
    if start <= end:
        parts.append(_digits(start, end) + tail)
    if int(high[0]) > end:
        parts.append(high[0] + _group(_same_length("0" * rest, high[1:])))
    return f"[0-9]{_count(rest + 1)}" if parts == [f"[0-9]{tail}"] else "|".join(parts)


def _digits(start: int, end: int) -> str:
    return str(start) if start == end else f"[{start}-{end}]"


def _count(n: int) -> str:
    """A repeat count after one digit class: "" for once, "{n}" for more."""
    return "" if n == 1 else f"{{{n}}}"


def _group(body: str) -> str:
    return f"(?:{body})" if "|" in body else body


def parse_instant(value: object, *, end_of_day: bool = False) -> datetime:
    """An aware UTC datetime from a string matching INSTANT_PATTERN. With end_of_day, the exclusive end of
    what was named: the day after a bare date, one microsecond after a datetime."""
    text = value if isinstance(value, str) else ""
    if not _INSTANT.fullmatch(text):
        raise InputError(
            "must be an ISO 8601 date or datetime from 1970 to 8999, e.g. 2026-01-31 or 2026-01-31T12:00:00Z"
        )
    day = parse_date(text) if len(text) == 10 else None
    moment = datetime.combine(day, time.min, tzinfo=UTC) if day else parse_datetime(text)
    assert moment is not None  # the pattern admits only what these parse
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
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
