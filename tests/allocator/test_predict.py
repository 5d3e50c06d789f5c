"""The runtime predictor (allocator/predict.py): named table cases, then properties (no look-ahead)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.predict import (
    LEVELS,
    Finished,
    Query,
    RuntimeHistory,
    command_family,
    name_family,
    predict_at,
)


def run(
    runtime: float,
    *,
    tenant: str = "nlp",
    name: str = "train",
    command: str = "python train.py",
    gpus: int = 1,
    ended: float = 0,
) -> Finished:
    return Finished(tenant, name_family(name), command_family(command), gpus, runtime, ended)


Q = Query("nlp", "train", "python train.py", 1)


@dataclass(frozen=True)
class Case:
    name: str
    history: list[Finished]
    query: Query = Q
    done_s: float = 0.0
    now: float = 10**9
    want_none: bool = False
    want_level: int = 0
    want_basis: int = 0
    want_median: float = 0.0
    want_p90: float = 0.0
    want_remaining_median: float | None = None


CASES = [
    Case("cold start: nothing finished", [], want_none=True),
    Case("two similar jobs are too few anywhere", [run(10), run(20)], want_none=True),
    Case(
        "same team, name and gang size",
        [run(100), run(200), run(300), run(5000, gpus=8)],
        want_level=0,
        want_basis=3,
        want_median=200,
        want_p90=280,
    ),
    Case(
        "run numbers in the name are one family",
        [run(100, name="train-7"), run(200, name="train-8"), run(300, name="train-9")],
        query=Query("nlp", name_family("train-10"), "", 1),
        want_level=0,
        want_basis=3,
        want_median=200,
        want_p90=280,
    ),
    Case(
        "another name, same command: command family",
        [run(10, name="a"), run(20, name="b"), run(30, name="c")],
        want_level=1,
        want_basis=3,
        want_median=20,
        want_p90=28,
    ),
    Case(
        "another gang size only: same name family at any size",
        [run(60, gpus=8), run(60, gpus=8), run(120, gpus=4)],
        want_level=2,
        want_basis=3,
        want_median=60,
        want_p90=108,
    ),
    Case(
        "nothing of the family: the team's jobs of that size",
        [
            run(10, name="x", command="sh x"),
            run(30, name="y", command="sh y"),
            run(50, name="z", command="sh z"),
        ],
        want_level=4,
        want_basis=3,
        want_median=30,
        want_p90=46,
    ),
    Case(
        "another team's jobs only at the widest level",
        [run(7, tenant="cv"), run(8, tenant="cv"), run(9, tenant="cv")],
        want_level=5,
        want_basis=3,
        want_median=8,
        want_p90=8.8,
    ),
    Case(
        "preempted after 150 s: only the jobs that ran longer, remaining = median - done",
        [run(100), run(200), run(300), run(400)],
        done_s=150,
        want_level=0,
        want_basis=3,
        want_median=300,
        want_p90=380,
        want_remaining_median=150,
    ),
    Case(
        "ran longer than every similar job: no prediction",
        [run(100), run(200), run(300), run(10, tenant="cv"), run(20, tenant="cv"), run(30, tenant="cv")],
        done_s=1000,
        want_none=True,
    ),
    Case(
        "jobs that finish after now are unknown",
        [run(100, ended=5), run(200, ended=6), run(300, ended=50)],
        now=10,
        want_none=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_table(case: Case) -> None:
    got = predict_at(case.query, case.history, case.now, case.done_s)
    if case.want_none:
        assert got is None
        return
    assert got is not None
    assert (got.level, got.basis) == (case.want_level, case.want_basis), LEVELS[got.level].name
    assert got.median_s == pytest.approx(case.want_median)
    assert got.p90_s == pytest.approx(case.want_p90)
    if case.want_remaining_median is not None:
        assert got.remaining_median_s == pytest.approx(case.want_remaining_median)


def test_families() -> None:
    assert name_family("Train-ResNet-run17") == name_family("train-resnet-run3") == "train-resnet-run"
    assert command_family("python /srv/a/train.py --lr 0.1") == "python train.py"
    assert command_family("python train.py --lr 0.3 --epochs 9") == "python train.py"
    assert command_family("./eval_12.sh data/x") == "eval_#.sh x"
    assert (
        command_family("python -m nodeagent.agent.demo_job --seconds 120")
        == "python nodeagent.agent.demo_job"
    )
    assert command_family("torchrun --nproc 8 train.py lr=3e-4 --epochs 90") == "torchrun train.py"
    assert command_family("") == name_family("") == ""


def test_window_keeps_the_newest() -> None:
    history = RuntimeHistory(window=3)
    for runtime in (1000, 1000, 1000, 10, 20, 30):
        history.add(run(runtime))
    got = history.predict(Q)
    assert got is not None and got.median_s == 20


finished = st.builds(
    Finished,
    tenant=st.sampled_from(["a", "b"]),
    name_family=st.sampled_from(["", "train", "eval"]),
    command_family=st.sampled_from(["", "python train.py"]),
    gpus=st.sampled_from([1, 2, 8]),
    runtime_s=st.floats(1, 1e6, allow_nan=False),
    ended_at=st.integers(0, 1000).map(float),
)
queries = st.builds(
    Query,
    tenant=st.sampled_from(["a", "b"]),
    name_family=st.sampled_from(["", "train", "eval"]),
    command_family=st.sampled_from(["", "python train.py"]),
    gpus=st.sampled_from([1, 2, 8]),
)


@settings(max_examples=300, deadline=None)
@given(
    past=st.lists(finished, max_size=40),
    future=st.lists(finished, max_size=40),
    query=queries,
    now=st.integers(0, 1000),
    done=st.sampled_from([0.0, 10.0, 1e4]),
)
def test_hiding_the_future_changes_nothing(
    past: list[Finished], future: list[Finished], query: Query, now: int, done: float
) -> None:
    """No look-ahead: jobs finishing after `now` (in any number, in any order) change no prediction."""
    known = [f for f in past if f.ended_at <= now]
    later = [f.__class__(**{**f.__dict__, "ended_at": now + 1 + f.ended_at}) for f in future]
    assert predict_at(query, known, now, done) == predict_at(query, later + past[::-1], now, done)


@settings(max_examples=200, deadline=None)
@given(past=st.lists(finished, min_size=1, max_size=60), query=queries, done=st.floats(0, 1e6))
def test_prediction_is_ordered_and_backed(past: list[Finished], query: Query, done: float) -> None:
    got = predict_at(query, past, 1000, done)
    if got is None:
        return
    assert got.basis >= 3
    assert done < got.median_s <= got.p90_s or (done == 0 and got.median_s <= got.p90_s)
    assert 0 <= got.remaining_median_s <= got.remaining_p90_s


def test_incremental_equals_batch() -> None:
    """The simulator feeds jobs one by one as they finish; the platform builds from a list: same answer."""
    jobs = [run(float(10 * i), ended=float(i), gpus=1 + i % 2) for i in range(1, 30)]
    history = RuntimeHistory()
    for job in jobs:
        history.add(job)
        assert history.predict(Q) == predict_at(Q, jobs, job.ended_at)


def test_a_program_level_says_program_not_command() -> None:
    """Issue 37 §5: the demo's 30 s job, predicted from 180 s runs of the same program, must not read as
    "same command": the level pools any arguments and says so."""
    history = RuntimeHistory()
    for i in range(3):
        history.add(
            Finished(
                "t", name_family(f"long-{i}"), command_family("python -m demo_job --seconds 180"), 1, 180, i
            )
        )
    query = Query("t", name_family("quick"), command_family("python -m demo_job --seconds 30"), 1)
    got = history.predict(query)
    assert got is not None and got.median_s == 180
    assert got.level_name == "same team, same program with any arguments, same GPU count"
    assert not any("command" in level.name for level in LEVELS)
