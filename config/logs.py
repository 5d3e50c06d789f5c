"""Structured logs: the ids that tie lines together, JSON or plain output, and redaction of secrets.

Ids live in a context variable, so every line logged while handling one request, one round step or one
agent batch carries them without being passed around: `with bind(round_id=7): ...`. The redaction filter sits
on the handler, so it sees every line, whichever logger wrote it (Django's, Celery's, ours).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import Any

from pythonjsonlogger.json import JsonFormatter

# The ids a line may carry, in the order plain lines print them.
ID_FIELDS = ("request_id", "task_id", "round_id", "job_id", "lease_id", "node")

_ids: ContextVar[dict[str, Any] | None] = ContextVar("gpumarket_log_ids", default=None)


def current_ids() -> dict[str, Any]:
    return dict(_ids.get() or {})


def push(**ids: Any) -> Token[dict[str, Any] | None]:
    """Add ids to every line logged from now on in this context; `pop` the token to take them back."""
    return _ids.set({**(_ids.get() or {}), **{k: v for k, v in ids.items() if v is not None}})


def pop(token: Token[dict[str, Any] | None]) -> None:
    with contextlib.suppress(ValueError):  # a token from another context (a signal on another thread)
        _ids.reset(token)


@contextlib.contextmanager
def bind(**ids: Any) -> Iterator[None]:
    """Add ids to every line logged inside the block (nested blocks add to the outer ones)."""
    token = push(**ids)
    try:
        yield
    finally:
        pop(token)


class ContextFilter(logging.Filter):
    """Copies the bound ids onto each record (an id given in `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_ids.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


REDACTED = "[redacted]"
_SENSITIVE_KEY = re.compile(r"(?i)pass(word|wd)?|secret|token|authorization|api[_-]?key|cookie|credential")
_PATTERNS = [
    # The platform's own API tokens, wherever they appear.
    (re.compile(r"gpm_[A-Za-z0-9_\-]{8,}"), REDACTED),
    # Authorization header values.
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{8,}"), rf"\1\2{REDACTED}"),
    # key=value, key: value, "key": "value" for sensitive keys.
    (
        re.compile(
            r"(?i)\b([\w-]*(?:pass(?:word|wd)?|secret|token|api[_-]?key|authorization|credential|cookie)[\w-]*)"
            r"""(["']?\s*[:=]\s*["']?)(?!\[redacted\])[^\s"'&,;}]+"""
        ),
        rf"\1\2{REDACTED}",
    ),
    # user:password@ in URLs (database, broker).
    (re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^:/\s@]*:)[^@\s/]+(@)"), rf"\1{REDACTED}\2"),
]
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# Django's request logger attaches the request object itself: the access line already says what it would.
_SKIPPED = {"request"}


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redact_value(key: str, value: Any) -> Any:
    if _SENSITIVE_KEY.search(key) and key not in ID_FIELDS:
        return REDACTED
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(key, v) for v in value]
    return value


class RedactFilter(logging.Filter):
    """Removes secrets from the message, its arguments, the extra fields and the traceback of each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the line
            message = f"{record.msg!r} {record.args!r}"
        record.msg, record.args = redact(message), None
        for key, value in list(vars(record).items()):
            if key not in _RESERVED:
                setattr(record, key, _redact_value(key, value))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class _RedactTraces:
    """Tracebacks are formatted by the formatter, after the filters ran: redact them there too."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return redact(super().formatException(ei))  # type: ignore[misc]  # a mixin: super() is the logging.Formatter it is mixed into

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return redact(super().formatStack(stack_info))  # type: ignore[misc]  # a mixin: super() is the logging.Formatter it is mixed into


class PlainFormatter(_RedactTraces, logging.Formatter):
    """`time level logger: message key=value ...` with the ids and extra fields at the end."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {
            k: v
            for k, v in vars(record).items()
            if k not in _RESERVED and k not in _SKIPPED and not k.startswith("_")
        }
        ordered = [k for k in ID_FIELDS if k in extra] + sorted(k for k in extra if k not in ID_FIELDS)
        pairs = " ".join(f"{k}={extra[k]}" for k in ordered)
        if not pairs:
            return line
        head, sep, tail = line.partition("\n")
        return f"{head} {pairs}{sep}{tail}"


class JsonLineFormatter(_RedactTraces, JsonFormatter):
    """One JSON object per line: time, level, logger, message, the ids and every extra field."""

    def __init__(self) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            timestamp=False,
            reserved_attrs=sorted(_RESERVED | _SKIPPED),
        )


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """The LOGGING setting: one console handler, ids added and secrets redacted before formatting."""
    if fmt not in ("plain", "json"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"LOG_FORMAT={fmt!r}: expected plain or json")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"ids": {"()": ContextFilter}, "redact": {"()": RedactFilter}},
        "formatters": {
            "plain": {"()": PlainFormatter},
            "json": {"()": JsonLineFormatter},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": fmt,
                "filters": ["ids", "redact"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        # Our own access line replaces Django's and runserver's, which would log each request twice.
        "loggers": {"django.server": {"level": "WARNING"}},
    }
