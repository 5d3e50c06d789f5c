"""Per-type speeds in traces (the optional `speed` column) and the replay that measures the platform's speed
estimator against them (allocator/sim/speeds.py; docs/simulator.md §Per-type speeds)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from allocator.sim.engine import simulate
from allocator.sim.errors import InputError
from allocator.sim.jobs import read_jobs
from allocator.sim.policies import POLICIES
from allocator.sim.scenario import read_scenario
from allocator.sim.speeds import replay_speeds, simulated_runs, speed_figures, uniform_runs
from allocator.sim.state import DONE, SimState, Start

from .conftest import Write, one_node_toml
from .test_reader import TENANT, TRACES

HEADER = "job_id,submit_s,tenant,gpus,duration_s"
TWO_TYPES = one_node_toml(TENANT) + '\n[[pools]]\ngpu_type = "v"\nnodes = 1\ngpus_per_node = 4\n'
SHIPPED = Path(__file__).resolve().parents[2] / "bench" / "scenarios" / "synthetic-speeds.toml"


def test_old_traces_load_with_speed_one_everywhere() -> None:
    jobs = read_jobs(read_scenario(TRACES / "synthetic-hetero.toml"))
    assert jobs.speed is None
    assert jobs.speeds().shape == (4039, 3) and (jobs.speeds() == 1).all()


def test_speed_column_parses_and_defaults_to_one(write: Write) -> None:
    csv = f"{HEADER},speed\nj1,0,a,1,10,v=0.5\nj2,0,a,1,10,\nj3,0,a,1,10, gpu = 2 | v=1.5 "
    jobs = read_jobs(read_scenario(write(TWO_TYPES, csv)))
    assert jobs.speeds().tolist() == [[1.0, 0.5], [1.0, 1.0], [2.0, 1.5]]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("gpu", "'speed' must be TYPE=FACTOR"),
        ("nope=2", "'speed' must be TYPE=FACTOR for pool types ['gpu', 'v']"),
        ("gpu=fast", "'speed' of gpu must be a number"),
        ("gpu=0", "'speed' of gpu must be a positive number"),
        ("gpu=-1", "'speed' of gpu must be a positive number"),
        ("gpu=inf", "'speed' of gpu must be a positive number"),
    ],
)
def test_bad_speed_is_located(write: Write, cell: str, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        read_jobs(read_scenario(write(TWO_TYPES, f"{HEADER},speed\nj1,0,a,1,10,{cell}")))
    assert "tiny.jobs.csv:2:" in str(caught.value) and expected in str(caught.value)


def test_replay_recovers_exact_speeds(write: Write) -> None:
    """Identical jobs, alternating between the types: once three have finished on each, the estimate is
    exactly the known ratio; before, a cold start."""
    rows = [f"j{i},{i * 1000},a,1,600,,v=0.5" for i in range(20)]
    csv = f"{HEADER},gpu_type,speed\n" + "\n".join(
        r.replace(",,", f",{'gpu' if i % 2 else 'v'},") for i, r in enumerate(rows)
    )
    scenario = read_scenario(write(TWO_TYPES, csv))
    jobs = read_jobs(scenario)
    replay = replay_speeds(scenario, jobs, "gpu", uniform_runs(jobs))
    v = replay.estimate[:, 1]
    assert np.isnan(v[:6]).all()  # no look-ahead: a job finishes 600-1200 s after its submit
    assert np.allclose(v[7:], 0.5) and (replay.truth[:, 1] == 0.5).all()
    got = speed_figures(replay)["v"]
    assert got["median_abs_rel_error"] == 0.0 and got["interval_coverage"] == 1.0
    assert got["cold_start_share"] == pytest.approx(np.isnan(v).mean(), abs=1e-4)


def test_the_shipped_speed_scenario_has_known_speeds() -> None:
    scenario = read_scenario(SHIPPED)
    jobs = read_jobs(scenario)
    assert jobs.speed is not None and len(jobs) == 4039
    a100 = scenario.types.index("A100")
    assert (jobs.speeds()[:, a100] == 1).all()
    figures = speed_figures(replay_speeds(scenario, jobs, "A100", uniform_runs(jobs)))
    assert set(figures) == {"H100", "V100"} and figures["H100"]["cold_start_share"] < 0.5


def _speed_state(write: Write, cell: str, checkpoint_min: int = 0) -> SimState:
    """One job of 10 hours' work at speed 1, running on pool `gpu` from 0 (the `speed` cell given)."""
    scenario = read_scenario(write(TWO_TYPES, f"{HEADER},gpu_type,speed\nj,0,a,1,36000,gpu,{cell}"))
    state = SimState(replace(scenario, checkpoint_min=checkpoint_min), read_jobs(scenario), 60)
    state.arrive(0, 0, None)
    one = np.zeros(1, dtype=np.int64)
    state.start(Start(job=0, pool=0, nodes=one, slots=one, price_micro=0), 0)
    return state


def test_a_job_runs_its_work_at_its_pools_speed(write: Write) -> None:
    state = _speed_state(write, "gpu=2")
    assert state.end_at[0] == 18000  # 10 h of work at twice the pace
    assert state.hold_end_at(0) is None  # the hold covers the faster run exactly
    learned: list[tuple[int, int, int, int]] = []
    state.predictor.finished = lambda *args: learned.append(args)  # type: ignore[method-assign]  # a spy
    state.complete(0)
    assert learned == [(0, 1, 18000, 18000)]  # the predictor learns what it took there, not its work


def test_a_preempted_job_keeps_the_work_its_pace_did(write: Write) -> None:
    state = _speed_state(write, "gpu=2", checkpoint_min=10)
    # 25 min on a pool twice as fast is 50 min of work; checkpoints every 10 min of work: 50 kept, none lost.
    assert state.last_checkpoint_at(0, 25 * 60) == 25 * 60
    state.preempt(0, 25 * 60)
    assert state.remaining_s[0] == 36000 - 50 * 60 and state.history.run_lost_gpu_s == [0]
    slow = _speed_state(write, "gpu=0.5", checkpoint_min=10)
    # 25 min at half the pace is 12.5 min of work: the checkpoint at 10 min of work is 20 min in; 5 min lost.
    assert slow.last_checkpoint_at(0, 25 * 60) == 20 * 60
    slow.preempt(0, 25 * 60)
    assert slow.remaining_s[0] == 36000 - 10 * 60 and slow.history.run_lost_gpu_s == [5 * 60]


def test_the_book_holds_for_the_slowest_acceptable_type(write: Write) -> None:
    scenario = read_scenario(write(TWO_TYPES, f"{HEADER},speed\nj,0,a,1,3600,gpu=2|v=0.5"))
    state = SimState(scenario, read_jobs(scenario), 60)
    assert state.hold_need_s_many(np.array([0])).tolist() == [7200]  # v, at half the pace
    assert state.run_need_s(0, 0) == 1800


def test_a_replay_with_speeds_runs_and_old_traces_replay_as_before(write: Write) -> None:
    csv = f"{HEADER},speed\nj1,0,a,1,3600,gpu=2\nj2,0,a,1,3600,gpu=0.5"
    scenario = read_scenario(write(one_node_toml(TENANT), csv))
    state = simulate(scenario, read_jobs(scenario), POLICIES["market"], 60)
    assert state.status.tolist() == [DONE, DONE]
    assert (state.finish - state.first_start).tolist() == [1800, 7200]
    plain = read_scenario(write(one_node_toml(TENANT), f"{HEADER}\nj1,0,a,1,3600\nj2,0,a,1,3600"))
    state = simulate(plain, read_jobs(plain), POLICIES["market"], 60)
    assert (state.finish - state.first_start).tolist() == [3600, 3600]


def test_the_estimator_learns_from_what_the_policy_ran(write: Write) -> None:
    """Jobs the market ran on one pool are learned at their finish, with what they took there; a job that
    moved between pools would be left out."""
    toml = one_node_toml(TENANT) + '\n[[pools]]\ngpu_type = "v"\nnodes = 1\ngpus_per_node = 8\n'
    rows = [f"j{i},{i * 4000},a,8,3600,{'gpu' if i % 2 else 'v'},v=0.5" for i in range(12)]
    scenario = read_scenario(write(toml, f"{HEADER},gpu_type,speed\n" + "\n".join(rows)))
    jobs = read_jobs(scenario)
    state = simulate(scenario, jobs, POLICIES["market"], 60)
    runs = simulated_runs(state)
    assert sorted(r.job for r in runs) == list(range(12))
    assert {(r.pool, r.runtime_s) for r in runs} == {(0, 3600.0), (1, 7200.0)}
    assert all(r.end == state.finish[r.job] for r in runs)
    replay = replay_speeds(scenario, jobs, "gpu", runs)
    known = ~np.isnan(replay.estimate[:, 1])
    assert known.any() and np.allclose(replay.estimate[known, 1], 0.5)
