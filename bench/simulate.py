"""Replay speed: philly-2017-dec under `market` and `static`; prints one JSON line.

Target (issue 5): the December month (about 8,000 jobs, 144 GPUs, 8,900 rounds of 300 s) replays under
`market` in less than 60 seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allocator.sim.engine import simulate  # noqa: E402
from allocator.sim.jobs import read_jobs  # noqa: E402
from allocator.sim.metrics import trace_of  # noqa: E402
from allocator.sim.policies import POLICIES  # noqa: E402
from allocator.sim.scenario import read_scenario  # noqa: E402

CANDIDATES = (ROOT / "shared" / "traces", ROOT.parent / "shared" / "traces", Path("/work/shared/traces"))


def _traces() -> Path:
    return next((p for p in CANDIDATES if p.is_dir()), CANDIDATES[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="philly-2017-dec")
    parser.add_argument("--traces", type=Path, default=None, help="folder holding the scenario files")
    args = parser.parse_args()
    scenario = read_scenario((args.traces or _traces()) / f"{args.scenario}.toml")
    jobs = read_jobs(scenario)
    seconds: dict[str, float] = {}
    rounds = 0
    for policy in ("market", "static"):
        started = time.perf_counter()
        state = simulate(scenario, jobs, POLICIES[policy])
        seconds[policy] = time.perf_counter() - started
        if policy == "market":
            rounds = len(trace_of(state).ticks)
    line = {
        "bench": "simulate",
        "scenario": scenario.name,
        "rounds": rounds,
        "market_s": round(seconds["market"], 2),
        "static_s": round(seconds["static"], 2),
        "rounds_per_s": round(rounds / seconds["market"], 1),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
