"""The market policy replays through the platform's own `allocator.clear`, with known answers on tiny books."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import allocator
from allocator.sim.state import DONE, REJECTED

from .conftest import HEADER, TWO, Replay, job, one_node_toml


def rows(prefix: str, tenant: str, count: int, submit: int, duration: int) -> str:
    return "\n".join(f"{prefix}{i},{submit},{tenant},1,{duration}" for i in range(count))


def test_market_rounds_go_through_the_allocators_clear(
    replay: Replay, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = allocator.clear
    books: list[Any] = []

    def spy(book: Any) -> Any:
        books.append(book)
        return real(book)

    monkeypatch.setattr(allocator, "clear", spy)
    csv = f"{HEADER}\n{rows('a', 'a', 6, 0, 2000)}\n{rows('b', 'b', 6, 700, 2000)}"
    for policy in ("market", "pure-auction"):
        books.clear()
        _, s = replay(one_node_toml(TWO), csv, policy)
        assert s["completed"] == 12
        assert len(books) == s["cleared_rounds"] > 0
        assert all(isinstance(b, allocator.book.Book) for b in books)


def test_one_tenant_one_job(replay: Replay) -> None:
    state, s = replay(one_node_toml(TWO), f"{HEADER}\nj1,10,a,2,1000", "market")
    assert (s["completed"], s["avg_queue_s"], s["avg_jct_s"]) == (1, 290.0, 1290.0)
    assert state.lease_tier[0] == allocator.book.TIER_G
    assert s["per_tenant"]["a"]["spend"] == pytest.approx(2 * 1000 / 3600, abs=0.01)  # at the reserve


def test_two_tenants_contending_each_get_their_guarantee(replay: Replay) -> None:
    csv = f"{HEADER}\n{rows('a', 'a', 8, 0, 5000)}\n{rows('b', 'b', 8, 0, 5000)}"
    state, s = replay(one_node_toml(TWO), csv, "market")
    first_round = state.first_start == 0
    tenants = state.jobs.tenant[first_round]
    assert np.bincount(tenants, minlength=2).tolist() == [4, 4]
    assert s["completed"] == 16 and s["preemptions"] == 0
    assert s["guarantee_compliance"] == 1.0


def test_a_gang_waits_for_a_whole_node(replay: Replay) -> None:
    tenants = TWO.replace("gpu = 4", "gpu = 8", 1).replace("gpu = 4", "gpu = 0")
    csv = f"{HEADER}\nsmall,0,a,1,900\ngang,5,a,8,100"
    state, _ = replay(one_node_toml(tenants), csv, "market")
    assert state.first_start[job(state, "small")] == 0
    assert state.first_start[job(state, "gang")] == 900  # the round at which the small job ends


def test_an_idle_guarantee_is_lent_then_reclaimed(replay: Replay) -> None:
    csv = f"{HEADER}\n{rows('a', 'a', 8, 0, 20000)}\n{rows('b', 'b', 4, 1000, 1000)}"
    state, s = replay(one_node_toml(TWO), csv, "market", overhead=60)
    a_jobs = state.jobs.tenant == 0
    # Lent: a takes all 8 GPUs while b is idle.
    assert (state.first_start[a_jobs] == 0).all()
    # Reclaimed: b's jobs start within two rounds of their submit, by preempting a's four borrowed leases.
    b_jobs = ~a_jobs
    assert (state.first_start[b_jobs] <= 1500).all()
    assert state.preemptions[a_jobs].sum() == 4
    assert s["preemptions"] == 4
    # The preempted jobs kept their progress and paid the restart overhead once.
    preempted = a_jobs & (state.preemptions == 1)
    kept = a_jobs & (state.preemptions == 0)
    assert (state.finish[kept] == 20000).all()
    lost = state.finish[preempted] - 20000
    assert (lost >= 60).all() and (lost < 20000).all()
    assert (state.status == DONE).all()


def test_a_budget_that_runs_out_stops_winning(replay: Replay) -> None:
    tenants = TWO.replace('name = "a"', 'name = "a"\nbudget = 1.5', 1)
    csv = f"{HEADER}\nj1,0,a,1,3600\nj2,0,a,1,3600\nj3,0,b,1,3600"
    state, s = replay(one_node_toml(tenants), csv, "market")
    assert state.status[job(state, "j1")] == DONE
    assert state.status[job(state, "j2")] == REJECTED
    assert s["rejected_reasons"] == {"budget exhausted": 1}
    assert s["per_tenant"]["a"]["spend"] == 1.0


def test_pure_auction_sells_to_the_highest_bid_at_the_uniform_price(replay: Replay) -> None:
    toml = one_node_toml(
        TWO.replace("gpu = 4", "gpu = 2"), gpus=4, extra="[pricing]\nreserve = { gpu = 1.0 }"
    )
    csv = f"{HEADER},gpu_type,price\nlow,1,a,4,3600,,2.0\nhigh,2,b,4,3600,,5.0"
    state, s = replay(toml, csv, "pure-auction")
    assert state.first_start[job(state, "high")] == 300
    assert state.first_start[job(state, "low")] == 3900
    # The first losing bid (2.0 per GPU-hour) sets the uniform price.
    assert s["per_tenant"]["b"]["spend"] == pytest.approx(4 * 2.0, abs=0.01)
