"""One figure for the work a preemption throws away (allocator/lost.py): the rule, and that what the simulator's
market ranks a victim on (its book's Leases.lost_gpu_s) is what the preemption records, whatever the moment. The
platform's side (the frozen book against the commit's record) is in tests/market/test_lost_work.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from allocator import TIER_S
from allocator.lost import lost_gpu_s, lost_since
from allocator.sim.jobs import read_jobs
from allocator.sim.policies.market import Market
from allocator.sim.scenario import read_scenario
from allocator.sim.state import SimState, Start

from .conftest import HEADER, TWO, Write, one_node_toml


def test_the_rule_stated_once() -> None:
    assert lost_since(None, None, 500) == 500  # not running yet: nothing to lose
    assert lost_since(None, 400, 500) == 500
    assert lost_since(100, None, 500) == 100  # never checkpointed: everything since it started
    assert lost_since(100, 300, 500) == 300  # since its last checkpoint
    assert lost_since(100, 50, 500) == 100  # a checkpoint from before this start saves nothing of it
    assert lost_gpu_s(8, 300, 500) == 1600
    assert lost_gpu_s(8, 600, 500) == 0  # never negative
    gpus, since = np.array([8, 1, 2]), np.array([300, 600, 0])
    assert lost_gpu_s(gpus, since, 500).tolist() == [lost_gpu_s(8, 300, 500), 0, 1000]


def _state(write: Write, checkpoint_min: int, gpus: int, overhead: int) -> SimState:
    scenario = read_scenario(write(one_node_toml(TWO), f"{HEADER}\nj,0,a,{gpus},36000"))
    state = SimState(replace(scenario, checkpoint_min=checkpoint_min), read_jobs(scenario), overhead)
    state.arrive(0, 0, None)
    return state


def _start(state: SimState, now: int) -> None:
    gpus = int(state.jobs.gpus[0])
    slots = np.arange(gpus, dtype=np.int64)
    state.start(
        Start(job=0, pool=0, nodes=np.zeros(gpus, dtype=np.int64), slots=slots, price_micro=0, tier=TIER_S),
        now,
    )


@pytest.mark.parametrize("checkpoint_min", [0, 7, 10])
@pytest.mark.parametrize("overhead", [0, 60])
def test_the_simulated_victim_is_recorded_with_the_figure_it_was_ranked_on(
    write: Write, checkpoint_min: int, overhead: int
) -> None:
    """Preempt one job again and again, at moments inside and outside its restart and at checkpoints: each
    time, the lost GPU-seconds recorded equal the market policy's book figure for that lease at that moment."""
    state = _state(write, checkpoint_min, 4, overhead)
    market = Market(state)
    now = 0
    for step in (25 * 60, 30, 20 * 60, 7 * 60 + 1, 3 * 3600):
        _start(state, now)
        now += step
        book = market.leases(now)
        ranked = int(book.lost_gpu_s(now)[list(book.lease).index(0)])
        state.preempt(0, now)
        assert state.history.run_lost_gpu_s[-1] == ranked, (step, now)
        now += 100
    assert any(state.history.run_lost_gpu_s) == (checkpoint_min > 0)
