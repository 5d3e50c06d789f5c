"""Decimals as JSON numbers (issue 29): `"max_hours": 3` and a bid's `"limit": 2.5` are taken like their string
forms, at the exact value of the number's text (config/parsers.JsonNumber), never through a float; the same
bounds and places apply, and true, NaN, Infinity and out-of-range numbers are a 400 naming the field."""

from __future__ import annotations

import io
import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypedDict, Unpack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from config.fields import DecimalStringField
from config.money import MICRO
from config.parsers import JSONParser, canonical_json
from market.api.jobs_serializers import HoursField
from market.api.ledger_serializers import CREDITS_MAX, CreditsField
from market.models import Bid, Job
from market.services.jobs import HOURS_MIN
from tests.conftest import World

URL = "/api/v1/tenants/alpha/jobs"


def _parse(raw: str) -> Any:
    """The value of `{"v": raw}` as the API's parser gives it: `raw` is JSON text, never a Python float."""
    return JSONParser().parse(io.BytesIO(f'{{"v": {raw}}}'.encode()))["v"]


def _spellings(number: Decimal) -> list[str]:
    """JSON number texts of `number`, written from the Decimal's own text: plain, shortest, exponent."""
    texts = {f"{number:f}", f"{number:e}", str(number), str(number.normalize())}
    if number == number.to_integral_value():
        texts.add(str(int(number)))
    return sorted(texts)


def _field_cases() -> list[tuple[DecimalStringField[int], int]]:
    return [(HoursField(), 4), (CreditsField(), 6), (CreditsField(allow_zero=True), 6)]


@st.composite
def _in_bounds(draw: st.DrawFn, field_places: tuple[DecimalStringField[int], int]) -> Decimal:
    field, places = field_places
    low, high = field.bounds()
    step = Decimal(1).scaleb(-places)
    units = draw(st.integers(int(low / step), int(high / step)))
    return Decimal(units).scaleb(-places)  # exactly `places` decimals: "12.500000"


@pytest.mark.parametrize("index", range(3), ids=["hours", "credits", "credits-or-zero"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_number_and_its_string_store_the_same_exact_value(index: int, data: st.DataObject) -> None:
    field, places = _field_cases()[index]
    number = data.draw(_in_bounds((field, places)))
    from_string = field.run_validation(_parse(json.dumps(f"{number:f}")))
    # What is stored: whole seconds for hours (half up), micro-credits for credits, computed exactly here.
    want = (
        int((number * 3600).to_integral_value(rounding=ROUND_HALF_UP))
        if isinstance(field, HoursField)
        else int(number * MICRO)
    )
    assert from_string == want
    for text in _spellings(number):
        assert field.run_validation(_parse(text)) == want, text


@pytest.mark.parametrize(
    ("raw", "micro"),
    [
        ("0.1", 100_000),  # a float cannot hold 0.1; the text can
        ("3", 3 * MICRO),
        ("3.0", 3 * MICRO),
        ("2.50000000", 2_500_000),  # trailing zeros are no decimals
        ("1e2", 100 * MICRO),
        ("1E-6", 1),
        ("0.000001", 1),
        ("999999999.999999", int(CREDITS_MAX * MICRO) - 1),  # 16 digits: past what a float spells exactly
        ("1000000000", int(CREDITS_MAX * MICRO)),
    ],
)
def test_credits_numbers_taken_exactly(raw: str, micro: int) -> None:
    assert CreditsField().run_validation(_parse(raw)) == micro


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("-1", "must be positive"),
        ("0", "must be positive"),
        ("-0.0", "must be positive"),
        ("0.0000001", "must be positive"),  # as the string "0.0000001" is: below the least amount
        ("4.0000001", "has more decimals than a micro-credit (6)"),
        ("1e-999999999", "must be positive"),
        ("1000000000.000001", "must be at most 1,000,000,000 credits"),
        ("1e300", "must be at most 1,000,000,000 credits"),
        ("true", 'must be a number or a decimal string such as "12.5"'),
        ("[1]", 'must be a number or a decimal string such as "12.5"'),
    ],
)
def test_credits_numbers_refused_like_their_strings(raw: str, message: str) -> None:
    with pytest.raises(serializers.ValidationError) as caught:
        CreditsField().run_validation(_parse(raw))
    assert caught.value.detail == [message]


def test_zero_and_minus_zero_where_zero_is_allowed() -> None:
    assert CreditsField(allow_zero=True).run_validation(_parse("-0.0")) == 0
    assert CreditsField(allow_zero=True).run_validation(_parse("0")) == 0


def test_hours_numbers_keep_the_hours_rules() -> None:
    hours = HoursField()
    assert hours.run_validation(_parse("3")) == 3 * 3600
    assert hours.run_validation(_parse("1e2")) == 100 * 3600
    assert hours.run_validation(_parse(str(HOURS_MIN))) == 60
    for raw, message in [
        ("0.0166", "must be at least 1 minute (0.0167 hours)"),
        ("-1", "must be at least 1 minute (0.0167 hours)"),
        ("1.00001", "has more than 4 decimals"),
        ("168.0001", "must be at most 168 hours"),
    ]:
        with pytest.raises(serializers.ValidationError) as caught:
            hours.run_validation(_parse(raw))
        assert caught.value.detail == [message], raw


# Through the API: the parser, the body's checks and the stored job.


@pytest.fixture
def market(world: World) -> World:
    world.nodes(world.h100, 1, size=8)
    return world


class _Headers(TypedDict, total=False):
    HTTP_IDEMPOTENCY_KEY: str


def _submit(world: World, raw: str, **headers: Unpack[_Headers]) -> Any:
    return world.client(world.alice).post(URL, raw, content_type="application/json", **headers)


def _body(hours: str, limit: str, name: str = "train") -> str:
    """A submit body as JSON text; `hours` and `limit` are JSON texts (`3`, `"3"`, `2.5`)."""
    return (
        f'{{"name": "{name}", "command": "python train.py", "gpus": 2, '
        f'"bids": [{{"gpu_type": "H100", "limit": {limit}}}], "max_hours": {hours}}}'
    )


@pytest.mark.django_db
def test_a_submit_with_numbers_stores_what_its_strings_store(market: World) -> None:
    as_numbers = _submit(market, _body("3", "2.5", name="numbers"))
    as_strings = _submit(market, _body('"3"', '"2.5"', name="strings"))
    assert (as_numbers.status_code, as_strings.status_code) == (201, 201), as_numbers.json()
    jobs = {job.name: job for job in Job.objects.all()}
    assert jobs["numbers"].max_seconds == jobs["strings"].max_seconds == 3 * 3600
    limits = {bid.job.name: bid.limits for bid in Bid.objects.select_related("job")}
    assert limits["numbers"] == limits["strings"]
    # Responses keep giving strings, whichever form came in.
    assert as_numbers.json()["max_hours"] == as_strings.json()["max_hours"] == "3"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("hours", "limit", "field"),
    [
        ("NaN", '"2"', "max_hours"),
        ("Infinity", '"2"', "max_hours"),
        ("1e400", '"2"', "max_hours"),
        ("true", '"2"', "max_hours"),
        ("-1", '"2"', "max_hours"),
        ('"2"', "-Infinity", "bids[0].limit"),
        ('"2"', "NaN", "bids[0].limit"),
        ('"2"', "1e400", "bids[0].limit"),
        ('"2"', "false", "bids[0].limit"),
        ('"2"', "0.0000001", "bids[0].limit"),
    ],
)
def test_a_bad_number_is_a_400_naming_the_field(market: World, hours: str, limit: str, field: str) -> None:
    resp = _submit(market, _body(hours, limit))
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["fields"]) == [field], resp.json()
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_retry_is_the_same_request_when_its_numbers_have_the_same_value(market: World) -> None:
    first = _submit(market, _body("3", "2.5"), HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201, first.json()
    # 3.0 and 2.50 are the values 3 and 2.5: the same request, answered with the first response.
    again = _submit(market, _body("3.0", "2.50"), HTTP_IDEMPOTENCY_KEY="k-1")
    assert (again.status_code, again.content) == (201, first.content)
    # "3", a string, is another JSON value: a different request under the same key (docs/jobs.md).
    other = _submit(market, _body('"3"', "2.5"), HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 409 and other.json()["error"] == "idempotency_key_reused", other.json()
    assert Job.objects.count() == 1


def test_canonical_json_writes_numbers_by_value() -> None:
    body = JSONParser().parse(io.BytesIO(b'{"b": [3, 3.0, 3e0, 2.50, "3", -0.0, 1e-999999999], "a": 0.1}'))
    assert canonical_json(body) == '{"a":0.1,"b":[3,3,3,2.5,"3",0,1e-999999999]}'


def test_the_agents_bodies_keep_plain_floats() -> None:
    # Usage parsing checks `type(x) is float` (nodeagent/services/usage_parse.py): the agent views' parser
    # gives exactly floats, the API's amounts parser JsonNumbers.
    from config.parsers import AgentJSONParser, JsonNumber, MeasurementJSONParser
    from nodeagent.api.agent import AgentView, UsageView

    body = MeasurementJSONParser().parse(io.BytesIO(b'{"util": 0.5, "n": 2}'))
    assert type(body["util"]) is float and type(body["n"]) is int
    assert type(_parse("0.5")) is JsonNumber and _parse("0.5").text == "0.5"
    assert AgentView.parser_classes == UsageView.parser_classes == [AgentJSONParser]  # plain floats, gzip too
    assert issubclass(AgentJSONParser, MeasurementJSONParser)
