"""Speed estimates' error per GPU type on a replay whose per-type speeds are known; prints one JSON line.

The scenario (default bench/scenarios/synthetic-speeds.toml, made by scripts/make_speed_scenario.py) carries a
known speed per job and type; allocator.sim.speeds replays it through the platform's estimator
(allocator/speed.py) and compares every estimate made at a submit with the job's known ratio to the reference.

    python bench/speed_estimates.py [--scenario PATH] [--reference A100] [--seed 0] [--policy market]
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
from allocator.sim.policies import POLICIES  # noqa: E402
from allocator.sim.scenario import read_scenario  # noqa: E402
from allocator.sim.speeds import replay_speeds, simulated_runs, speed_figures, uniform_runs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--scenario", type=Path, default=ROOT / "bench" / "scenarios" / "synthetic-speeds.toml"
    )
    parser.add_argument("--reference", default="A100", help="the type speeds are relative to")
    parser.add_argument("--seed", type=int, default=0, help="seeds which acceptable type each job runs on")
    parser.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        default=None,
        help="learn from what this policy's replay ran (minutes) instead of uniform placements at submit",
    )
    args = parser.parse_args()
    scenario = read_scenario(args.scenario)
    jobs = read_jobs(scenario)
    started = time.perf_counter()
    if args.policy is None:
        runs = uniform_runs(jobs, args.seed)
    else:
        runs = simulated_runs(simulate(scenario, jobs, POLICIES[args.policy], 60))
    replay = replay_speeds(scenario, jobs, args.reference, runs)
    line = {
        "bench": "speed_estimates",
        "scenario": scenario.name,
        "reference": args.reference,
        "seed": args.seed,
        "placement": args.policy or "uniform at submit",
        "runs_learned": len(runs),
        "jobs": len(jobs),
        "per_type": speed_figures(replay),
        "replay_s": round(time.perf_counter() - started, 2),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
