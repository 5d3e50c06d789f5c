"""Small scenarios written to a temporary directory, and a one-call replay of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from allocator.sim.engine import simulate
from allocator.sim.jobs import read_jobs
from allocator.sim.metrics import summarize
from allocator.sim.policies import POLICIES
from allocator.sim.scenario import read_scenario
from allocator.sim.state import SimState

Write = Callable[[str, str], Path]

# Two tenants with equal guarantees and weights, and the jobs file header, shared by the policy tests.
HEADER = "job_id,submit_s,tenant,gpus,duration_s"
TWO = """
[[tenants]]
name = "a"
guaranteed = { gpu = 4 }
weight = 1

[[tenants]]
name = "b"
guaranteed = { gpu = 4 }
weight = 1
"""


def one_node_toml(tenants: str, gpus: int = 8, extra: str = "") -> str:
    """A scenario with one pool of one node; `tenants` is the [[tenants]] tables."""
    return dedent(
        f"""
        name = "tiny"
        jobs = "tiny.jobs.csv"
        round_s = 300
        {extra}
        [[pools]]
        gpu_type = "gpu"
        nodes = 1
        gpus_per_node = {gpus}
        """
    ) + dedent(tenants)


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """Write a scenario and its jobs CSV; returns the scenario path."""

    def _write(toml: str, csv: str) -> Path:
        (tmp_path / "tiny.jobs.csv").write_text(dedent(csv).strip() + "\n", encoding="utf-8")
        path = tmp_path / "tiny.toml"
        path.write_text(dedent(toml), encoding="utf-8")
        return path

    return _write


Replay = Callable[..., tuple[SimState, dict[str, Any]]]


@pytest.fixture
def replay(write: Write) -> Replay:
    """Replay a small scenario under one policy; returns the final state and the summary."""

    def _replay(toml: str, csv: str, policy: str, overhead: int = 60) -> tuple[SimState, dict[str, Any]]:
        scenario = read_scenario(write(toml, csv))
        state = simulate(scenario, read_jobs(scenario), POLICIES[policy], overhead)
        return state, summarize(state, policy, 0.0)

    return _replay


def job(state: SimState, job_id: str) -> int:
    return state.jobs.ids.index(job_id)
