"""The checkpoint model (scenario `checkpoint_min`, `--checkpoint-min`): what a preemption throws away."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest

from allocator.sim.cli import main
from allocator.sim.engine import simulate
from allocator.sim.errors import InputError
from allocator.sim.jobs import read_jobs
from allocator.sim.metrics import Summary, summarize
from allocator.sim.policies import POLICIES
from allocator.sim.policies.market import Market
from allocator.sim.scenario import read_scenario
from allocator.sim.state import COMPLETED, DONE, PREEMPTED, SimState, Start

from .conftest import HEADER, TWO, Write, one_node_toml


def _running(write: Write, checkpoint_min: int, gpus: int = 1, overhead: int = 60) -> SimState:
    """A state whose one job (10 hours of work) was submitted at 0 and started at 0 on `gpus` GPUs."""
    scenario = read_scenario(write(one_node_toml(TWO), f"{HEADER}\nj,0,a,{gpus},36000"))
    state = SimState(replace(scenario, checkpoint_min=checkpoint_min), read_jobs(scenario), overhead)
    state.arrive(0, 0, None)
    _start(state, 0)
    return state


def _start(state: SimState, now: int) -> None:
    gpus = int(state.jobs.gpus[0])
    slots = np.arange(gpus, dtype=np.int64)
    state.start(Start(job=0, pool=0, nodes=np.zeros(gpus, dtype=np.int64), slots=slots, price_micro=0), now)


@pytest.mark.parametrize(
    ("checkpoint_min", "gpus", "preempt_at", "lost_s", "checkpoint_at"),
    [
        (10, 1, 25 * 60, 5 * 60, 20 * 60),  # the brief's case: 25 min in, checkpoints every 10 -> 5 min lost
        (10, 4, 25 * 60, 5 * 60, 20 * 60),  # lost GPU-seconds are per GPU of the gang
        (10, 1, 20 * 60, 0, 20 * 60),  # preempted right at a checkpoint
        (10, 1, 9 * 60, 9 * 60, 0),  # before the first checkpoint: all of it, back to the segment's start
        (0, 1, 25 * 60, 0, 25 * 60),  # off: nothing lost, the "checkpoint" is now
        (7, 1, 25 * 60, 4 * 60, 21 * 60),
    ],
)
def test_a_preemption_loses_the_progress_since_the_last_checkpoint(
    write: Write, checkpoint_min: int, gpus: int, preempt_at: int, lost_s: int, checkpoint_at: int
) -> None:
    state = _running(write, checkpoint_min, gpus)
    assert state.last_checkpoint_at(0, preempt_at) == checkpoint_at
    assert state.last_checkpoint_at_many(np.array([0]), preempt_at).tolist() == [checkpoint_at]
    state.preempt(0, preempt_at)
    assert state.history.run_ended == [PREEMPTED]
    assert state.history.run_lost_gpu_s == [lost_s * gpus]
    # The work left grows back by what was lost: it is redone after the restart.
    assert state.remaining_s[0] == 36000 - preempt_at + lost_s


def test_the_restart_redoes_the_lost_progress(write: Write) -> None:
    state = _running(write, checkpoint_min=10, overhead=60)
    state.preempt(0, 25 * 60)  # keeps 20 minutes
    _start(state, 2000)
    # The second segment: 60 s of restart overhead, then the 5 lost minutes again, then the rest.
    assert state.end_at[0] == 2000 + 60 + 36000 - 20 * 60
    # 700 s of progress into the second segment: 1,900 s done in all, last checkpoint at 1,800 s of progress,
    # reached 600 s after the restart overhead.
    assert state.last_checkpoint_at(0, 2000 + 60 + 700) == 2000 + 60 + 600
    # Restarted, nothing saved in this segment yet: its work counts from the end of the restart overhead.
    assert state.last_checkpoint_at(0, 2000 + 60 + 500) == 2000 + 60
    # Still restarting: nothing of this segment is progress, so a preemption now loses nothing (the restart
    # is owed again in full); the figure the market's book ranks on is the one the preemption records.
    assert state.last_checkpoint_at(0, 2030) == 2030
    state.preempt(0, 2030)
    assert state.history.run_lost_gpu_s == [300, 0]
    assert state.remaining_s[0] == 36000 - 20 * 60
    _start(state, 3000)
    state.complete(0)
    assert state.history.run_ended == [PREEMPTED, PREEMPTED, COMPLETED]
    assert state.finish[0] == 3000 + 60 + 36000 - 20 * 60


def _reclaim(write: Write, checkpoint_min: int) -> tuple[SimState, Summary]:
    """tests/simulator/test_market.py's reclaim: a's 8 long jobs take the node; b's 4 reclaim half of it."""
    rows = [f"a{i},0,a,1,20000" for i in range(8)] + [f"b{i},1000,b,1,1000" for i in range(4)]
    extra = f"checkpoint_min = {checkpoint_min}" if checkpoint_min else ""
    scenario = read_scenario(write(one_node_toml(TWO, extra=extra), HEADER + "\n" + "\n".join(rows)))
    state = simulate(scenario, read_jobs(scenario), POLICIES["market"], 60)
    return state, summarize(state, "market", 0.0)


def test_a_replay_with_checkpoints_redoes_the_lost_work(write: Write) -> None:
    off, s_off = _reclaim(write, 0)
    on, s_on = _reclaim(write, 7)
    assert s_off["preemptions"] == s_on["preemptions"] == 4
    assert (s_off["lost_gpu_hours"], s_off["lost_share"], s_off["checkpoint_min"]) == (0.0, 0.0, 0)
    h = on.history
    preempted = [i for i, ended in enumerate(h.run_ended) if ended == PREEMPTED]
    lost_s = [(h.run_end[i] - h.run_start[i]) % 420 for i in preempted]  # 1 GPU each, from 0
    assert [h.run_lost_gpu_s[i] for i in preempted] == lost_s and all(s > 0 for s in lost_s)
    # Each preempted job finishes later by exactly what it lost; the others are untouched.
    jobs = np.array([h.run_job[i] for i in preempted])
    assert (on.finish[jobs] - off.finish[jobs]).tolist() == lost_s
    assert (on.status == DONE).all()
    assert s_on["lost_gpu_hours"] == round(sum(lost_s) / 3600, 3)
    assert s_on["per_tenant"]["a"]["lost_gpu_hours"] == s_on["lost_gpu_hours"]
    assert s_on["per_tenant"]["b"]["lost_gpu_hours"] == 0.0
    delivered = sum((e - s) for s, e in zip(h.run_start, h.run_end, strict=True))  # every job has 1 GPU
    assert s_on["lost_share"] == round(sum(lost_s) / delivered, 4)
    assert s_on["checkpoint_min"] == 7


def _scenario_error(write: Write, toml: str) -> str:
    with pytest.raises(InputError) as caught:
        read_scenario(write(toml, f"{HEADER}\n"))
    return str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("-5", "'checkpoint_min' must be at least 0, got -5"),
        ("2.5", "'checkpoint_min' must be an integer, got 2.5"),
        ('"10"', "'checkpoint_min' must be an integer, got '10'"),
        ("true", "'checkpoint_min' must be an integer, got True"),
    ],
)
def test_a_bad_checkpoint_min_names_file_and_line(write: Write, value: str, expected: str) -> None:
    toml = one_node_toml(TWO, extra=f"checkpoint_min = {value}")
    line = toml.splitlines().index(f"checkpoint_min = {value}") + 1
    message = _scenario_error(write, toml)
    assert f"tiny.toml:{line}: {expected}" in message


def test_checkpoint_min_is_read_and_defaults_to_off(write: Write) -> None:
    assert read_scenario(write(one_node_toml(TWO), f"{HEADER}\n")).checkpoint_min == 0
    assert (
        read_scenario(write(one_node_toml(TWO, extra="checkpoint_min = 0"), f"{HEADER}\n")).checkpoint_min
        == 0
    )
    assert (
        read_scenario(write(one_node_toml(TWO, extra="checkpoint_min = 15"), f"{HEADER}\n")).checkpoint_min
        == 15
    )


def test_the_flag_overrides_the_scenario(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [f"a{i},0,a,1,20000" for i in range(8)] + [f"b{i},1000,b,1,1000" for i in range(4)]
    path = write(one_node_toml(TWO, extra="checkpoint_min = 7"), HEADER + "\n" + "\n".join(rows))
    summaries = []
    for flag in ([], ["--checkpoint-min", "0"], ["--checkpoint-min", "10"]):
        stdout = io.StringIO()
        assert main([str(path), "--policy", "market", "--quiet", *flag], stdout) == 0
        summaries.append(json.loads(stdout.getvalue().splitlines()[0]))
    assert [s["checkpoint_min"] for s in summaries] == [7, 0, 10]
    assert summaries[0]["lost_gpu_hours"] > 0 and summaries[1]["lost_gpu_hours"] == 0.0
    assert main([str(path), "--quiet", "--checkpoint-min", "-1"]) == 2
    assert "--checkpoint-min: must be a non-negative number of minutes" in capsys.readouterr().err


def test_the_market_can_hand_each_lease_its_last_checkpoint(write: Write) -> None:
    for checkpoint_min, expected in ((10, 1200), (0, 1500)):
        state = _running(write, checkpoint_min)
        market = POLICIES["market"](state)
        assert isinstance(market, Market)
        assert market.lease_checkpoints(np.array([0]), 1500).tolist() == [expected]
