"""Writes bench/scenarios/synthetic-speeds.{toml,jobs.csv}: the synthetic-hetero trace (shared/traces) with a
known per-type speed for every job, for the speed estimates' figure (bench/speed_estimates.py;
docs/simulator.md §Per-type speeds).

Speeds follow each team's workload: a team's jobs run at a team-wide factor per type (H100 1.6-3.0x and V100
0.3-0.6x the A100's pace, drawn once per team), times a per-job jitter of about 10% (lognormal), since jobs of
one team are alike but not identical. A100 is 1 everywhere. Seeded: the same files every time.

    python scripts/make_speed_scenario.py [SOURCE_DIR]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

SEED = 27
JITTER = 0.10
OUT = Path(__file__).resolve().parents[1] / "bench" / "scenarios"


def team_speeds(teams: list[str], rng: np.random.Generator) -> dict[str, dict[str, float]]:
    return {
        t: {"H100": float(rng.uniform(1.6, 3.0)), "A100": 1.0, "V100": float(rng.uniform(0.3, 0.6))}
        for t in teams
    }


def main(source: Path) -> None:
    rng = np.random.default_rng(SEED)
    with (source / "synthetic-hetero.jobs.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    teams = sorted({r["tenant"] for r in rows})
    speeds = team_speeds(teams, rng)
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "synthetic-speeds.jobs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, [*rows[0].keys(), "speed"], lineterminator="\n")
        writer.writeheader()
        for row in rows:
            jitter = rng.lognormal(0, JITTER, size=2)
            team = speeds[row["tenant"]]
            h100, v100 = team["H100"] * jitter[0], team["V100"] * jitter[1]
            writer.writerow({**row, "speed": f"H100={h100:.4f}|A100=1|V100={v100:.4f}"})
    toml = (source / "synthetic-hetero.toml").read_text(encoding="utf-8")
    toml = toml.replace('name = "synthetic-hetero"', 'name = "synthetic-speeds"')
    toml = toml.replace('jobs = "synthetic-hetero.jobs.csv"', 'jobs = "synthetic-speeds.jobs.csv"')
    header = (
        "# synthetic-hetero with a known per-type speed per job (scripts/make_speed_scenario.py, seed 27):\n"
        "# team-wide factors H100 1.6-3.0x, V100 0.3-0.6x of A100, times ~10% per-job jitter.\n"
    )
    (OUT / "synthetic-speeds.toml").write_text(header + toml, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/traces"))
