"""Structured logs: request ids accepted or made, ids on every line, JSON output, and no secret in any line."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client

from config.logs import REDACTED, ContextFilter, JsonLineFormatter, PlainFormatter, RedactFilter, bind, redact

SECRETS = [
    "Authorization: Bearer gpm_abcdefghijklmnopqrstuvwxyz012345",
    "password=hunter2hunter2",
    '{"password": "hunter2hunter2", "user": "alice"}',
    "token: sk-live-9f8e7d6c5b4a",
    "postgres://gpumarket:hunter2hunter2@db.internal:5432/gpumarket",
    "api_key=AKIAEXAMPLEKEY99",
    "SECRET_KEY='hunter2hunter2'",
]


def emit(fmt: logging.Formatter, msg: str, *args: object, exc: bool = False, **extra: object) -> str:
    record = logging.getLogger("t").makeRecord("t", logging.INFO, __file__, 1, msg, args, None, extra=extra)
    if exc:
        try:
            raise RuntimeError("connect failed: password=hunter2hunter2")
        except RuntimeError:
            import sys

            record.exc_info = sys.exc_info()
    ContextFilter().filter(record)
    RedactFilter().filter(record)
    return fmt.format(record)


@pytest.mark.parametrize("text", SECRETS)
def test_secrets_are_redacted_in_message_args_extras_and_tracebacks(text: str) -> None:
    for fmt in (PlainFormatter(), JsonLineFormatter()):
        lines = [
            emit(fmt, text),
            emit(fmt, "got %s", text),
            emit(fmt, "call", body=text, headers={"Authorization": "Bearer abc"}),
            emit(fmt, "failed", exc=True),
        ]
        for line in lines:
            assert "hunter2" not in line and "gpm_abc" not in line and "sk-live" not in line, line
            assert "AKIAEXAMPLE" not in line and "Bearer abc" not in line, line
        assert REDACTED in lines[0]


def test_ordinary_text_is_left_alone() -> None:
    text = "round 7 committed: 12 winners, tokens of esteem, passing grade"
    assert redact(text) == text


def test_ids_bound_in_a_block_reach_every_line_and_go_away_after() -> None:
    with bind(round_id=7, job_id=None):
        line = emit(PlainFormatter(), "step done", step="freeze")
    assert line.endswith("round_id=7 step=freeze")
    assert "round_id" not in emit(PlainFormatter(), "later")


def test_json_lines_carry_level_logger_message_and_ids() -> None:
    with bind(request_id="abc-123", node="n1"):
        line = emit(JsonLineFormatter(), "usage batch %s", "ingested", samples=8)
    data = json.loads(line)
    assert data["level"] == "INFO" and data["logger"] == "t" and data["message"] == "usage batch ingested"
    assert data["request_id"] == "abc-123" and data["node"] == "n1" and data["samples"] == 8


@pytest.mark.django_db
def test_one_access_line_per_request_with_the_callers_request_id(caplog) -> None:
    caplog.set_level(logging.INFO, logger="gpumarket.access")
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="req-42.a")
    assert response["X-Request-ID"] == "req-42.a"
    [record] = [r for r in caplog.records if r.name == "gpumarket.access"]
    assert record.request_id == "req-42.a" and record.route == "healthz" and record.status == 200


@pytest.mark.django_db
def test_a_forged_request_id_is_replaced(caplog) -> None:
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="x\ninjected=1 " + "y" * 200)
    assert len(response["X-Request-ID"]) == 32 and "\n" not in response["X-Request-ID"]
