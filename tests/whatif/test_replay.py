"""The replay's simulator side, without Django: a Trace written in the scenario format and replayed through
the market with a policy's options (price step, price cap), both of which must change what happens."""

from __future__ import annotations

from pathlib import Path

from allocator.sim.engine import simulate
from allocator.sim.jobs import read_jobs
from allocator.sim.policies.market import Market, MarketOptions
from allocator.sim.scenario import read_scenario
from whatif.replay import Side, replay
from whatif.trace import Trace, TraceJob, TracePool, TraceTenant, write_trace

MICRO = 1_000_000


def _trace() -> Trace:
    """Sixteen one-GPU jobs bidding 5 credits for eight GPUs nobody is guaranteed: the price must climb."""
    jobs = tuple(TraceJob(f"j{i}", i, "ab"[i % 2], 1, 10_000, ("H100",), 5 * MICRO) for i in range(16))
    tenants = (TraceTenant("a", {}, 1, None), TraceTenant("b", {}, 2, 500 * MICRO))
    return Trace("t", 300, (TracePool("H100", 1, 8),), tenants, {"H100": MICRO}, jobs)


def _top_price(tmp_path: Path, options: MarketOptions) -> float:
    scenario = read_scenario(write_trace(_trace(), tmp_path / "t.toml"))
    state = simulate(scenario, read_jobs(scenario), lambda s: Market(s, options))
    return max(row[0] for row in state.history.price_micro) / MICRO


def test_the_written_trace_reads_back_exactly(tmp_path: Path) -> None:
    scenario = read_scenario(write_trace(_trace(), tmp_path / "t.toml"))
    assert [t.name for t in scenario.tenants] == ["a", "b"]
    assert scenario.tenants[1].budget_micro == 500 * MICRO and scenario.tenants[0].budget_micro is None
    jobs = read_jobs(scenario)
    assert len(jobs) == 16 and set(jobs.price_micro[:, 0]) == {5 * MICRO}


def test_the_price_step_and_the_price_cap_reach_the_clearing(tmp_path: Path) -> None:
    slow = _top_price(tmp_path, MarketOptions(price_step_bp=100))
    fast = _top_price(tmp_path, MarketOptions(price_step_bp=2_000))
    capped = _top_price(tmp_path, MarketOptions(price_step_bp=2_000, max_price_micro=(("H100", 2 * MICRO),)))
    assert slow < fast
    assert capped == 2.0


def test_replay_reports_progress_up_to_the_end(tmp_path: Path) -> None:
    seen: list[float] = []
    side = Side(_trace(), MarketOptions())
    out = replay(side, side, seen.append, plots=False)
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert out.summaries["today"]["completed"] == out.summaries["proposal"]["completed"] == 16
