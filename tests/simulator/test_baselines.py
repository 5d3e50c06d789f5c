"""Hand-made scenarios with known answers under the baselines, and the engine's clock and accounting."""

from __future__ import annotations

import pytest

from allocator.sim.scenario import MICRO
from allocator.sim.state import DONE, REJECTED

from .conftest import HEADER, TWO, Replay, job, one_node_toml


@pytest.mark.parametrize("policy", ["static", "pooled-fifo"])
def test_one_tenant_one_job(replay: Replay, policy: str) -> None:
    state, s = replay(one_node_toml(TWO), f"{HEADER}\nj1,10,a,2,1000", policy)
    # Submitted at 10, the next round is at 300; it runs 1,000 s.
    assert (s["completed"], s["avg_queue_s"], s["avg_jct_s"]) == (1, 290.0, 1290.0)
    assert state.finish[0] == 1300
    assert s["per_tenant"]["a"]["spend"] == pytest.approx(
        2 * 1000 / 3600, abs=0.01
    )  # at the 1-credit reserve


def test_static_keeps_each_tenant_inside_its_guarantee(replay: Replay) -> None:
    csv = f"{HEADER}\na1,0,a,4,1000\na2,0,a,4,1000\nb1,0,b,2,500"
    state, s = replay(one_node_toml(TWO), csv, "static")
    assert state.first_start[job(state, "a1")] == 0
    # b's idle half is not lent: a2 waits for a1 although 2 GPUs sit idle from t=600.
    assert state.first_start[job(state, "a2")] == 1200
    assert s["per_tenant"]["b"]["avg_queue_s"] == 0.0


def test_static_rejects_what_no_guarantee_can_hold(replay: Replay) -> None:
    state, s = replay(one_node_toml(TWO), f"{HEADER}\nbig,0,a,6,100\nok,0,a,1,100", "static")
    assert state.status[job(state, "big")] == REJECTED
    assert s["rejected_reasons"] == {"needs more GPUs than the tenant's guarantee of any acceptable type": 1}
    assert state.status[job(state, "ok")] == DONE


def test_pooled_fifo_blocks_behind_the_head(replay: Replay) -> None:
    csv = f"{HEADER}\nr,0,a,6,1000\ng,1,b,4,100\ns,2,b,1,100"
    state, _ = replay(one_node_toml(TWO), csv, "pooled-fifo")
    # The 4-GPU gang must wait for the 6-GPU job; the 1-GPU job would fit but queues behind it.
    assert state.first_start[job(state, "g")] == 1200
    assert state.first_start[job(state, "s")] == 1200


@pytest.mark.parametrize("policy", ["static", "pooled-fifo"])
def test_a_gang_waits_until_a_whole_node_frees(replay: Replay, policy: str) -> None:
    toml = one_node_toml(TWO.replace("gpu = 4", "gpu = 8", 1).replace("gpu = 4", "gpu = 0"), gpus=8)
    toml = toml.replace("nodes = 1", "nodes = 2")
    toml = toml.replace("gpu = 8 }", "gpu = 16 }")
    csv = f"{HEADER}\nsmall,0,a,1,900\nmid,0,a,8,2000\ngang,5,a,16,100"
    state, _ = replay(toml, csv, policy)
    # small and mid take one GPU of each node; the 16-GPU gang needs both nodes whole.
    assert state.first_start[job(state, "gang")] == 2100


def test_budget_that_runs_out_rejects_what_it_cannot_pay(replay: Replay) -> None:
    tenants = TWO.replace('name = "a"', 'name = "a"\nbudget = 1.5', 1)
    csv = f"{HEADER}\nj1,0,a,1,3600\nj2,0,a,1,3600\nj3,0,b,1,3600"
    state, s = replay(one_node_toml(tenants), csv, "pooled-fifo")
    # a holds 1 credit for j1's hour; the 0.5 left cannot hold j2's hour at the 1-credit reserve.
    assert state.status[job(state, "j2")] == REJECTED
    assert s["rejected_reasons"] == {"budget exhausted": 1}
    assert s["per_tenant"]["a"]["spend"] == 1.0
    assert state.spent_micro[0] <= int(1.5 * MICRO)


def test_idle_months_are_skipped(replay: Replay) -> None:
    year = 365 * 86400
    state, s = replay(one_node_toml(TWO), f"{HEADER}\nj1,0,a,1,100\nj2,{year},b,1,100", "pooled-fifo")
    assert s["completed"] == 2 and s["cleared_rounds"] == 2
    assert s["rounds"] > 100_000  # the figures still count every round tick


def test_utilization_and_compliance_figures(replay: Replay) -> None:
    # 4 of 8 GPUs busy between the first submit (0) and the last (3000), nothing waiting.
    csv = f"{HEADER}\nj1,0,a,4,3000\nj2,3000,b,1,300"
    _, s = replay(one_node_toml(TWO), csv, "static")
    assert s["utilization"] == 0.5
    assert s["busy_utilization"] is None  # no round ended with a job waiting
    assert s["guarantee_compliance"] == 1.0
    assert s["makespan_s"] == 3300


def test_head_of_line_blocking_counts_against_guarantee_compliance(replay: Replay) -> None:
    # b's 1-GPU job would fit b's idle guarantee but waits behind b's 8-GPU head under pooled FIFO.
    csv = f"{HEADER}\nr,0,a,4,3000\nh,0,b,8,100\nw,0,b,1,100"
    _, s = replay(one_node_toml(TWO), csv, "pooled-fifo")
    assert s["per_tenant"]["b"]["guarantee_compliance"] < 1.0
    assert s["per_tenant"]["a"]["guarantee_compliance"] == 1.0


def test_summary_has_every_documented_key(replay: Replay) -> None:
    _, s = replay(one_node_toml(TWO), f"{HEADER}\nj1,0,a,1,100", "static")
    keys = "scenario policy jobs completed rejected avg_jct_s p50_jct_s p95_jct_s avg_queue_s p50_queue_s"
    keys += " p95_queue_s utilization busy_utilization guarantee_compliance jain_excess preemptions"
    keys += " makespan_s rounds sim_wall_s per_tenant fair_share_compliance_24h fair_share_compliance_1h"
    keys += " fair_share_round_compliance fair_share_shortfall"
    assert set(keys.split()) <= set(s)
    assert {"spend", "completed", "avg_queue_s", "guarantee_compliance"} <= set(s["per_tenant"]["a"])
