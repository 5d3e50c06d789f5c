"""The API takes exactly what its schema says (docs/reliability.md §The schema): each documented pattern,
judged by the ECMA regex engine a client's validator uses (jsonschema_rs, as schemathesis does), against the
field that checks the input; the pattern builders against plain arithmetic; strict JSON types."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import jsonschema_rs
import pytest
from rest_framework import serializers

from config.api import BodySerializer
from config.fields import TEXT, TEXT_OR_BLANK, AnyField, InstantField, TextField
from config.inputs import INSTANT_PATTERN, InputError, decimal_pattern, parse_instant
from market.api.jobs_serializers import HoursField, JobFilterSerializer
from market.api.ledger_serializers import CreditsField
from tests.conftest import World

DECIMALS = [
    *["", "0", "0.0", "0.000000", "0.000001", "0.0000001", "1", "01", "00", "1.", ".5", "1.5", "12.50"],
    *["-1", "+1", "1e3", "1E3", " 1", "1 ", "1\n", "\n1", "1,000", "NaN", "Infinity", "0x10", "1_000"],
    *["999999999.999999", "1000000000", "1000000000.000000", "1000000000.000001", "1000000001"],
    *["0.0167", "0.0166", "0.01670", "0.017", "0.02", "0.1", "167.9999", "168", "168.0", "168.0001", "169"],
    *["١", "１", "1.5.5", "1..5", "4.0000001", "9" * 41],
]


def _valid(pattern: str, text: str) -> bool:
    return bool(jsonschema_rs.validator_for({"type": "string", "pattern": pattern}).is_valid(text))


def _takes(field: AnyField, value: Any) -> bool:
    try:
        field.run_validation(value)
    except serializers.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    "field",
    [CreditsField(), CreditsField(allow_zero=True), HoursField()],
    ids=["credits", "credits-or-zero", "hours"],
)
def test_decimal_fields_take_what_their_pattern_says(field: Any) -> None:
    for text in DECIMALS:
        assert _valid(field.schema_pattern, text) == _takes(field, text), text
    # A JSON number is the other form (tests/test_decimal_numbers.py); true never is.
    assert (
        _takes(field, 5) and _takes(field, 5.5) and not _takes(field, True) and not _takes(field, 5.0000001)
    )


def test_decimal_pattern_is_the_range_it_names() -> None:
    plain = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]{1,2})?")
    texts = {f"{i}{f}" for i in range(0, 30) for f in ["", ".0", ".00", ".5", ".05", ".50", ".99", ".001"]}
    texts |= {"", "01", "1.", ".5", "-1"}
    for low, high in [
        ("0", "25"),
        ("0.01", "3.5"),
        ("2.05", "2.5"),
        ("7", "7"),
        ("0.99", "1"),
        ("1.5", "20"),
    ]:
        pattern = re.compile(decimal_pattern(places=2, low=Decimal(low), high=Decimal(high)))
        for text in texts:
            want = bool(plain.fullmatch(text)) and Decimal(low) <= Decimal(text) <= Decimal(high)
            assert bool(pattern.fullmatch(text)) == want, (low, high, text)


def test_instant_pattern_is_the_calendar_from_1970_to_8999() -> None:
    pattern = re.compile(INSTANT_PATTERN)
    for year in (1969, 1970, 1996, 2000, 2024, 2025, 2100, 2400, 8996, 8999, 9000):
        for month in range(1, 13):
            for day in range(0, 33):
                try:
                    real = 1970 <= year < 9000 and bool(date(year, month, day))
                except ValueError:
                    real = False
                assert bool(pattern.fullmatch(f"{year:04d}-{month:02d}-{day:02d}")) == real, (
                    year,
                    month,
                    day,
                )
    each = date(1970, 1, 1)
    while each < date(1975, 1, 1):  # every day of a leap cycle and then some
        assert pattern.fullmatch(each.isoformat())
        each += timedelta(days=1)


INSTANTS = [
    *["2026-01-31", "2026-01-31T12:00", "2026-01-31 12:00", "2026-01-31T12:00:00", "2026-01-31T12:00:00Z"],
    *["2026-01-31T12:00:00.5+02:00", "2026-01-31T12:00:00.123456-23:59", "2026-01-31T12:00+0530"],
    *["2026-01-31T12:00+05", "1970-01-01T00:00:00+23:59", "8999-12-31T23:59:59.999999-23:59", "2024-02-29"],
    *["", "0", "2026-02-29", "2026-1-31", "2026-01-31T24:00", "2026-01-31t12:00", "2026-01-31T12:00:60"],
    *["2026-01-31T12", "2026-01-31T12:00:00.1234567", "2026-01-31\n", "2026-01-31T12:00:00+24:00"],
    *["1969-12-31", "9000-01-01", "9999-12-31", "0001-01-01T00:00:00-23:59", "20260131", "2026-W05"],
]


def test_instants_are_taken_as_their_pattern_says() -> None:
    field = InstantField()
    for text in INSTANTS:
        assert _valid(field.schema_pattern, text) == _takes(field, text), text


def test_an_instant_is_read_in_utc() -> None:
    assert parse_instant("2026-01-31T12:00+02:00").isoformat() == "2026-01-31T10:00:00+00:00"
    assert parse_instant("2026-01-31", end_of_day=True).isoformat() == "2026-02-01T00:00:00+00:00"
    with pytest.raises(InputError):
        parse_instant("2026-02-30")


TEXTS = ["a", " a ", " ", "\t\n", "\u00a0", "\ufeff", "\x1c", "\u3000", "x" * 10, "x" * 11, "a\x00", "\x00"]


@pytest.mark.parametrize("blank", [False, True], ids=["not-blank", "blank-allowed"])
def test_text_is_taken_as_its_schema_says(blank: bool) -> None:
    field = TextField(max_length=10, allow_blank=blank)
    schema: dict[str, Any] = {"type": "string", "maxLength": 10, "pattern": field.schema_pattern}
    if blank:  # as drf-spectacular documents a blank-allowed field with a pattern
        schema = {"oneOf": [schema, {"type": "string", "maxLength": 0}]}
    else:
        schema["minLength"] = 1
    validator = jsonschema_rs.validator_for(schema)
    for text in ["", *TEXTS]:
        assert validator.is_valid(text) == _takes(field, text), repr(text)
    assert field.schema_pattern == (TEXT_OR_BLANK if blank else TEXT)
    assert not _takes(field, 5) and not _takes(field, False)


def test_a_job_state_list_is_taken_as_its_pattern_says() -> None:
    field = JobFilterSerializer().fields["state"]
    assert isinstance(field, TextField)
    for text in [
        "running",
        "running,pending",
        "running,running",
        "running, pending",
        "running,",
        ",",
        "Running",
    ]:
        assert _valid(field.schema_pattern, text) == _takes(field, text), text


class _Body(BodySerializer):
    refuse_unknown = True
    name = TextField(required=False)
    gpus = serializers.IntegerField(required=False)
    on = serializers.BooleanField(required=False)
    ratio = serializers.FloatField(required=False)
    limits = serializers.DictField(child=serializers.IntegerField(), required=False)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": 5}, "name"),
        ({"gpus": "5"}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"gpus": 5.5}, "gpus"),
        ({"on": 0}, "on"),
        ({"on": "true"}, "on"),
        ({"ratio": "0.5"}, "ratio"),
        ({"limits": {"H100": "2"}}, "limits.H100"),
        ({"limits": [2]}, "limits"),
        ({"other": 1}, "other"),
    ],
)
def test_a_body_takes_only_the_documented_json_types(data: dict[str, Any], field: str) -> None:
    from config.api import flatten_errors

    body = _Body(data=data)
    assert not body.is_valid()
    assert field in flatten_errors(body.errors), body.errors


def test_a_body_takes_what_json_types_allow() -> None:
    body = _Body(data={"name": "a", "gpus": 5.0, "on": False, "ratio": 1, "limits": {"H100": 2}})
    assert body.is_valid(), body.errors
    assert body.validated_data["gpus"] == 5


def test_a_form_is_text_and_parsed_as_such() -> None:
    body = _Body(data={"gpus": "5", "on": "true"}, context={"form": True})
    assert body.is_valid(), body.errors
    assert (body.validated_data["gpus"], body.validated_data["on"]) == (5, True)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("page", "status"),
    [("1", 200), ("0001", 200), ("999999999", 404), ("1000000000", 400), ("9" * 30, 400), ("last", 400)],
)
def test_pages_are_taken_up_to_the_documented_maximum(world: World, page: str, status: int) -> None:
    resp = world.client(world.amy).get(f"/api/v1/tenants/alpha/tokens?page={page}")
    assert resp.status_code == status, resp.json()


@pytest.mark.django_db
def test_the_schema_states_the_rules(client: Any) -> None:
    schema = client.get("/api/schema/?format=json").json()
    parts = schema["components"]["schemas"]
    submit = parts["JobSubmitRequest"]["properties"]
    # A decimal is a string with the pattern or a number with the same bounds and step.
    assert submit["max_hours"]["oneOf"] == [
        {"type": "string", "pattern": HoursField().schema_pattern},
        {"type": "number", "minimum": 0.0167, "maximum": 168, "multipleOf": 0.0001},
    ]
    assert submit["bids"]["minItems"] == 1
    assert parts["BidEntryRequest"]["properties"]["limit"]["oneOf"] == [
        {"type": "string", "pattern": CreditsField().schema_pattern},
        {"type": "number", "minimum": 0.000001, "maximum": 1_000_000_000, "multipleOf": 0.000001},
    ]
    assert submit["name"]["pattern"] == TEXT
    assert parts["PatchedHoldPolicyRequest"]["additionalProperties"] is False
    assert "pattern" not in parts["PriceBoard"]["properties"]["reserve_credits"]  # responses say "1,000"
    jobs = schema["paths"]["/api/v1/tenants/{slug}/jobs"]["get"]["parameters"]
    page = next(p for p in jobs if p["name"] == "page")
    assert page["schema"]["maximum"] == 999_999_999
