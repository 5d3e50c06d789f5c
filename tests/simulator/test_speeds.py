"""Per-type speeds in traces (the optional `speed` column) and the replay that measures the platform's speed
estimator against them (allocator/sim/speeds.py; docs/simulator.md §Per-type speeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from allocator.sim.errors import InputError
from allocator.sim.jobs import read_jobs
from allocator.sim.scenario import read_scenario
from allocator.sim.speeds import replay_speeds, speed_figures

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
    replay = replay_speeds(scenario, read_jobs(scenario), "gpu")
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
    figures = speed_figures(replay_speeds(scenario, jobs, "A100"))
    assert set(figures) == {"H100", "V100"} and figures["H100"]["cold_start_share"] < 0.5
