"""The speed estimator (allocator/speed.py): named table cases, then properties."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.predict import Finished, Query
from allocator.speed import SpeedHistory, limit_for_same_work, weighted_median


def run(
    runtime: float, gpu_type: str, *, tenant: str = "nlp", name: str = "train", gpus: int = 1
) -> Finished:
    return Finished(tenant, name, "python train.py", gpus, runtime, 0.0, gpu_type)


Q = Query("nlp", "train", "python train.py", 1)


@dataclass(frozen=True)
class Case:
    name: str
    history: list[Finished]
    gpu_type: str = "H100"
    want_factor: float | None = None  # None: cold start
    want_level: int | None = None
    want_runs: int = 0
    want_strata: int = 0
    query: Query = Q
    approx: float = 1e-9
    extra: dict[str, object] = field(default_factory=dict)


def same(runtimes: list[float], speed: float, **kw: Any) -> list[Finished]:
    """Each runtime on A100 and the same job on H100 at `speed` times the pace."""
    return [run(r, "A100", **kw) for r in runtimes] + [run(r / speed, "H100", **kw) for r in runtimes]


CASES = [
    Case("cold start: nothing finished", []),
    Case("one type only: no comparison", [run(100, "A100")] * 10),
    Case("the other type only: no comparison", [run(100, "H100")] * 10),
    Case("one run on each type is never enough", [run(100, "A100"), run(50, "H100")]),
    Case(
        "three on each type at the narrowest level",
        same([100, 200, 300], 2.0),
        want_factor=2.0,
        want_level=0,
        want_runs=3,
        want_strata=1,
    ),  # fmt: skip
    Case(
        "skewed: H100 happened to run the long jobs of other families; strata keep them apart",
        [run(100, "A100", name="a")] * 3
        + [run(50, "H100", name="a")] * 3
        + [run(10_000, "H100", name="b")] * 20
        + [run(20_000, "A100", name="b")] * 3,
        query=Query("nlp", "c", "python train.py", 1),  # no family of its own: level 1, same command
        want_factor=2.0,
        want_level=1,
        want_runs=23,
        want_strata=2,
    ),  # fmt: skip
    Case(
        "an outlier does not move the median",
        [run(100, "A100")] * 5 + [run(50, "H100")] * 4 + [run(1e7, "H100")],
        want_factor=2.0,
        want_level=0,
        want_runs=5,
        want_strata=1,
    ),  # fmt: skip
    Case(
        "falls back to other teams with the same GPU count",
        same([100, 200, 300], 4.0, tenant="cv", name="x") + [run(9, "A100")] * 5,
        want_factor=4.0,
        want_level=5,
        want_runs=3,
        want_strata=1,
    ),  # fmt: skip
    Case(
        "a slower type has a factor below one",
        same([600, 900, 1200], 0.5),
        want_factor=0.5,
        want_level=0,
        want_runs=3,
        want_strata=1,
    ),  # fmt: skip
    Case("runs of no time are ignored", [run(0, "A100")] * 5 + [run(0, "H100")] * 5),
    Case(
        "runs of unknown type are ignored",
        [Finished("nlp", "train", "python train.py", 1, 100, 0.0)] * 5 + [run(50, "H100")] * 5,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_factor(case: Case) -> None:
    h = SpeedHistory()
    for job in case.history:
        h.add(job)
    got = h.factor(case.query, case.gpu_type, "A100")
    if case.want_factor is None:
        assert got.factor is None and got.confidence == "none" and got.interval is None
        return
    assert got.factor is not None and got.factor == pytest.approx(case.want_factor, rel=1e-6)
    assert (got.level, got.runs, got.strata) == (case.want_level, case.want_runs, case.want_strata)
    lo, hi = got.interval or (0, 0)
    assert lo <= got.factor <= hi


def test_reference_is_one_and_runtimes_follow_the_factors() -> None:
    h = SpeedHistory()
    for job in same([100, 200, 300], 2.0):
        h.add(job)
    got = h.speeds(Q, ["H100", "V100"], "A100")
    assert got.factors["A100"].factor == 1.0 and got.factors["A100"].confidence == "reference"
    assert got.factors["V100"].factor is None
    # Runs on H100 count as twice as long on A100: the A100 median is 200 s, H100's 100 s.
    assert got.reference_median_s == pytest.approx(200)
    assert got.median_basis == 6
    assert got.runtime_s("H100") == pytest.approx(100)
    assert got.runtime_s("V100") is None


def test_confidence_grows_with_samples_and_agreement() -> None:
    few, many, noisy = SpeedHistory(), SpeedHistory(), SpeedHistory()
    for job in same([100, 110, 120], 2.0):
        few.add(job)
    for job in same([100 + i for i in range(60)], 2.0):
        many.add(job)
    for job in [run(r, "A100") for r in (10, 100, 1000)] + [run(r, "H100") for r in (5, 500, 50)]:
        noisy.add(job)
    se = [h.factor(Q, "H100", "A100").se or 0 for h in (few, many, noisy)]
    assert se[1] < se[0] < se[2]
    assert many.factor(Q, "H100", "A100").confidence == "high"
    assert noisy.factor(Q, "H100", "A100").confidence == "low"


@pytest.mark.parametrize(
    ("limit", "factor", "want"),
    [
        (2_000_000, 1.5, (3_000_000, None)),
        (2_000_000, 0.1, (1_000_000, "reserve")),
        (2_000_000, 10.0, (5_000_000, "max")),
    ],
)
def test_limit_for_same_work(limit: int, factor: float, want: tuple[int, str | None]) -> None:
    assert limit_for_same_work(limit, factor, 1_000_000, 5_000_000) == want


def test_weighted_median() -> None:
    assert weighted_median([1, 2, 3], [1, 1, 1]) == 2
    assert weighted_median([1, 2], [1, 1]) == 1.5
    assert weighted_median([1, 10], [1, 5]) == 10


@settings(max_examples=60, deadline=None)
@given(
    speed=st.floats(0.1, 10),
    runtimes=st.lists(st.floats(1, 1e6), min_size=3, max_size=30),
)
def test_exact_speeds_are_recovered(speed: float, runtimes: list[float]) -> None:
    """The same jobs run on both types at a fixed ratio: the factor is that ratio, whatever the runtimes."""
    h = SpeedHistory()
    for job in same(runtimes, speed):
        h.add(job)
    got = h.factor(Q, "H100", "A100").factor
    assert got is not None and math.isclose(got, speed, rel_tol=1e-6)


def test_chained_through_a_third_type() -> None:
    """V100 never ran beside H100, but both ran beside A100: V100 against H100 goes through A100."""
    h = SpeedHistory()
    for job in same([100, 200, 300], 2.0, name="a"):  # H100 twice A100's pace
        h.add(job)
    for job in same([100, 200, 300], 0.5, name="b"):  # V100 half A100's pace, in another family
        h.add(replace(job, gpu_type="V100") if job.gpu_type == "H100" else job)
    got = h.speeds(Q, ["A100", "V100"], "H100").factors
    assert got["A100"].factor == pytest.approx(0.5) and got["A100"].via is None
    v = got["V100"]
    assert v.factor == pytest.approx(0.25) and v.via == "A100"
    assert v.se is not None and v.se > (got["A100"].se or 0)  # less sure than either step
    # A type compared with nothing stays a cold start.
    assert h.speeds(Q, ["B200"], "H100").factors["B200"].factor is None
