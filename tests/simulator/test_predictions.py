"""The predictor inside a replay (fed only by jobs finished by a job's submit) and the hold rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.predict import Finished, predict_at
from allocator.sim.engine import simulate
from allocator.sim.holds import STOPPED_AT_HOLD, HoldRule
from allocator.sim.jobs import read_jobs
from allocator.sim.metrics import summarize
from allocator.sim.policies import POLICIES
from allocator.sim.scenario import read_scenario
from allocator.sim.state import DONE

from .conftest import HEADER, Write, job, one_node_toml

ONE = """
[[tenants]]
name = "a"
guaranteed = { gpu = 8 }
weight = 1
"""


def _run(write: Write, toml: str, csv: str, policy: str = "market", holds: HoldRule | None = None):
    scenario = read_scenario(write(toml, csv))
    state = simulate(scenario, read_jobs(scenario), POLICIES[policy], 60, holds=holds)
    return state, summarize(state, policy, 0.0)


def test_error_figures_on_a_regular_workload(write: Write) -> None:
    rows = [f"j{i},{i * 4000},a,1,3600" for i in range(10)]
    state, summary = _run(write, one_node_toml(ONE), "\n".join([HEADER, *rows]))
    # Three jobs must finish before the first prediction: jobs 0-3 are cold (job 3 arrives with 3 done).
    assert summary["predicted_jobs"] == 7 and summary["prediction_coverage"] == 0.7
    assert summary["prediction_mdape"] == 0.0 and summary["prediction_p90_exceeded"] == 0.0
    assert np.isnan(state.predictor.median[job(state, "j2")])
    assert state.predictor.median[job(state, "j3")] == 3600


@pytest.mark.parametrize("policy", ["market", "pooled-fifo"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_predictions_see_only_jobs_finished_by_the_submit(write: Write, policy: str, seed: int) -> None:
    """A replayed random workload: rebuild every prediction from only the jobs that had finished by the job's
    submit time (the future hidden): the same numbers."""
    rng = np.random.default_rng(seed)
    rows = [
        f"j{i},{int(t)},{'a' if i % 3 else 'b'},{int(g)},{int(d)}"
        for i, (t, g, d) in enumerate(
            zip(
                np.sort(rng.integers(0, 40_000, 60)),
                rng.choice([1, 2, 4], 60),
                rng.integers(60, 9000, 60),
                strict=True,
            )
        )
    ]
    tenants = ONE.replace("{ gpu = 8 }", "{ gpu = 4 }") + ONE.replace('"a"', '"b"').replace(
        "{ gpu = 8 }", "{ gpu = 4 }"
    )
    state, _ = _run(write, one_node_toml(tenants), "\n".join([HEADER, *rows]), policy)
    jobs, names = state.jobs, ["a", "b"]
    done = [
        Finished(
            names[jobs.tenant[j]],
            "",
            "",
            int(jobs.gpus[j]),
            float(jobs.duration_s[j]),
            float(state.finish[j]),
        )
        for j in range(len(jobs))
        if state.status[j] == DONE
    ]
    for j in range(len(jobs)):
        want = predict_at(
            state.predictor.query(int(jobs.tenant[j]), int(jobs.gpus[j])), done, float(jobs.submit_s[j])
        )
        got = state.predictor.median[j]
        assert (want is None and np.isnan(got)) or (want is not None and want.median_s == got), jobs.ids[j]


BUDGET = """
[[tenants]]
name = "a"
guaranteed = { gpu = 8 }
weight = 1
budget = 20
"""


def test_predicted_holds_let_a_budget_limited_tenant_run_more_jobs(write: Write) -> None:
    # 1 credit per GPU-hour; 30 one-hour jobs, one every 2 h; 20 credits. Max-hours holds (10 h = 10 credits)
    # stop starting jobs once less than 10 credits are left; predicted holds (1 h) run until 1 is left.
    rows = [f"j{i},{i * 7200},a,1,3600" for i in range(30)]
    toml, csv = one_node_toml(BUDGET), "\n".join([HEADER, *rows])
    done = {}
    for rule in ("exact", "max-hours", "predicted"):
        state, summary = _run(write, toml, csv, holds=HoldRule(rule, max_hours=10))
        done[rule] = summary["completed"]
        assert summary["spend"] <= 20 and summary["stopped_at_hold"] == 0
        assert summary["holds"] == rule
    assert done["max-hours"] == 11 < done["predicted"] == done["exact"] == 20


def test_a_job_outliving_its_hold_is_extended_or_stopped(write: Write) -> None:
    # Three 1 h jobs teach the predictor "1 h"; then a 5 h job: its 1 h hold runs out.
    rows = [f"j{i},{i * 4000},a,1,3600" for i in range(3)] + ["long,20000,a,1,18000"]
    csv = "\n".join([HEADER, *rows])
    rich, rich_summary = _run(write, one_node_toml(BUDGET), csv, holds=HoldRule("predicted", 10))
    assert rich.status[job(rich, "long")] == DONE and rich_summary["stopped_at_hold"] == 0
    # Extended 1 h -> 2 h -> 4 h -> 8 h: held at most what the balance could pay, spent the real 5 h.
    assert rich_summary["spend"] == pytest.approx(8.0, abs=0.1)
    # 6 credits, max hours 3 (a cold job holds 3): the short jobs spend 3; the long one holds 1 h, is extended
    # once (1 h more), and is stopped when that runs out: 2 more would be needed and 1 is left.
    poor_toml = one_node_toml(BUDGET.replace("budget = 20", "budget = 6"))
    poor, poor_summary = _run(write, poor_toml, csv, holds=HoldRule("predicted", 3))
    long = job(poor, "long")
    assert poor.stopped_at_hold[long] and poor.reject_reason[long] == STOPPED_AT_HOLD
    assert poor_summary["spend"] == 5 and poor_summary["stopped_at_hold"] == 1
