"""Integer micro-credits (ARCHITECTURE.md §Money): parsing and formatting, never floats."""

from __future__ import annotations

from config.inputs import InputError, parse_decimal

MICRO = 1_000_000
# Amounts live in 64-bit signed columns; cap what one call may move well inside that.
MAX_AMOUNT = 10**15  # one billion credits


class AmountError(ValueError):
    """An amount that is not a whole number of micro-credits; the message says why."""


def parse_credits(value: object) -> int:
    """Micro-credits from a credits value such as "12.5" or 12; refuses floats' rounding and junk."""
    try:
        amount = parse_decimal(value, places=6, noun="a number of credits")
    except InputError as exc:
        message = str(exc)
        raise AmountError(
            message.replace("more than 6 decimals", "more decimals than a micro-credit (6)")
        ) from exc
    return int(amount * MICRO)


def format_credits(micro: int) -> str:
    sign = "-" if micro < 0 else ""
    whole, frac = divmod(abs(int(micro)), MICRO)
    return f"{sign}{whole:,}.{frac:06d}".rstrip("0").rstrip(".") if frac else f"{sign}{whole:,}"


def format_fixed(micro: int, *, decimals: int = 2, up: bool = False) -> str:
    """Credits with exactly `decimals` decimals ("1,234.50"), rounded half up, or up with `up` (for a price
    one must bid at least, so that the figure shown is enough). A non-zero amount that would round to zero
    is written exactly instead ("0.004167"): a charge for a 15-second job must not read as nothing."""
    unit = MICRO // 10**decimals
    sign = "-" if micro < 0 else ""
    value = abs(int(micro))
    units = -(-value // unit) if up else (value + unit // 2) // unit
    if units == 0 and value:
        return f"{sign}0.{value:06d}".rstrip("0")
    whole, frac = divmod(units, 10**decimals)
    return f"{sign}{whole:,}.{frac:0{decimals}d}" if decimals else f"{sign}{whole:,}"
