"""`simulate SCENARIO.toml [--policy P ...] [--out DIR] [--seed N] [--quiet]`, shared by the Django command
and `python -m allocator.sim`."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
from tqdm import tqdm

from allocator.sim.engine import simulate
from allocator.sim.errors import InputError
from allocator.sim.holds import HOLD_RULES, HoldRule
from allocator.sim.jobs import Jobs, read_jobs
from allocator.sim.metrics import summarize
from allocator.sim.policies import POLICIES
from allocator.sim.report import table, write_records, write_summary
from allocator.sim.scenario import MICRO, Scenario, read_scenario
from allocator.sim.state import SimState

# tqdm shows nothing for runs shorter than this, so quick runs stay quiet without --quiet.
PROGRESS_DELAY_S = 3.0


class Out(Protocol):
    """Where the summaries go: a text stream, or the Django command's OutputWrapper (no TextIO)."""

    def write(self, s: str, /) -> object: ...
    def flush(self) -> object: ...


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file (format: shared/traces/README.md)")
    parser.add_argument(
        "--policy",
        action="append",
        choices=sorted(POLICIES),
        help="policy to replay; repeat to compare several (default: all four)",
    )
    parser.add_argument(
        "--out", type=Path, help="directory for summary.json, runs.csv, waits.csv and the plots"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for any randomness (the replay is deterministic)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--restart-overhead", type=int, default=60, metavar="S", help="seconds lost per restart"
    )
    parser.add_argument(
        "--checkpoint-min",
        type=int,
        metavar="N",
        help="every job checkpoints every N minutes of its progress; a preempted job redoes the progress since "
        "its last checkpoint (overrides the scenario's checkpoint_min; 0 = keeps all its progress)",
    )
    parser.add_argument(
        "--fair-share-half-life",
        type=float,
        metavar="H",
        help="market: half-life of the fair-share history in hours (default: the allocator's own, 24; 0 = no "
        "history, every round starts afresh)",
    )
    parser.add_argument(
        "--no-plots", action="store_true", help="no plots (summary.json, runs.csv and waits.csv only)"
    )
    parser.add_argument(
        "--holds",
        choices=HOLD_RULES,
        default="exact",
        help="what a budget-limited tenant's holds pay for (docs/predictions.md): exact (default), "
        "max-hours, predicted",
    )
    parser.add_argument(
        "--max-hours",
        type=float,
        default=168.0,
        metavar="H",
        help="max hours every job declares (default 168)",
    )
    parser.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="TENANT=CREDITS",
        help="give a tenant this budget, replacing the scenario's; repeat for several",
    )


def with_budgets(scenario: Scenario, budgets: list[str]) -> Scenario:
    """The scenario with `--budget TENANT=CREDITS` overrides; a bad one is an InputError naming it."""
    by_name = {t.name: t for t in scenario.tenants}
    for given in budgets:
        name, _, credits = given.partition("=")
        if name not in by_name:
            raise InputError("--budget", None, f"unknown tenant {name!r} in {given!r}")
        try:
            amount = float(credits)
        except ValueError:
            raise InputError("--budget", None, f"{given!r}: the budget must be a number of credits") from None
        if not amount >= 0 or amount == float("inf"):
            raise InputError("--budget", None, f"{given!r}: the budget must be a non-negative number")
        by_name[name] = replace(by_name[name], budget_micro=round(amount * MICRO))
    return replace(scenario, tenants=tuple(by_name[t.name] for t in scenario.tenants))


def with_checkpoint(scenario: Scenario, checkpoint_min: int | None) -> Scenario:
    """The scenario with `--checkpoint-min N` overriding its `checkpoint_min`, when given."""
    if checkpoint_min is None:
        return scenario
    if checkpoint_min < 0:
        raise InputError(
            "--checkpoint-min", None, f"must be a non-negative number of minutes, got {checkpoint_min}"
        )
    return replace(scenario, checkpoint_min=checkpoint_min)


def run_policy(
    scenario: Scenario,
    jobs: Jobs,
    policy: str,
    restart_overhead_s: int,
    quiet: bool,
    holds: HoldRule | None = None,
    half_life_h: float | None = None,
) -> tuple[SimState, dict[str, Any]]:
    factory = POLICIES[policy]
    if half_life_h is not None and policy == "market":
        from allocator.sim.policies.market import Market, MarketOptions

        options = MarketOptions(fair_share_half_life_s=round(half_life_h * 3600))
        factory = lambda state: Market(state, options)  # noqa: E731
    bar = tqdm(
        total=len(jobs),
        desc=f"{scenario.name} {policy}",
        unit="job",
        file=sys.stderr,
        disable=quiet,
        delay=PROGRESS_DELAY_S,
        leave=False,
    )
    started = time.perf_counter()
    with bar:
        state = simulate(scenario, jobs, factory, restart_overhead_s, lambda n: bar.update(n - bar.n), holds)
    wall = time.perf_counter() - started
    return state, summarize(state, policy, wall)


def run(args: argparse.Namespace, stdout: Out) -> list[dict[str, Any]]:
    random.seed(args.seed)
    np.random.seed(args.seed)
    # getattr: the Django command (call_command) builds its own namespace and may not forward the flag.
    checkpoint_min = getattr(args, "checkpoint_min", None)
    scenario = with_checkpoint(with_budgets(read_scenario(args.scenario), args.budget), checkpoint_min)
    jobs = read_jobs(scenario)
    if args.max_hours <= 0:
        raise InputError("--max-hours", None, "must be positive")
    holds = HoldRule(args.holds, args.max_hours)
    half_life_h = getattr(args, "fair_share_half_life", None)
    if half_life_h is not None and not 0 <= half_life_h < 10**6:
        raise InputError(
            "--fair-share-half-life", None, f"must be a non-negative number of hours, got {half_life_h}"
        )
    policies = list(dict.fromkeys(args.policy or POLICIES))
    states: dict[str, SimState] = {}
    summaries: list[dict[str, Any]] = []
    for policy in policies:
        states[policy], summary = run_policy(
            scenario, jobs, policy, args.restart_overhead, args.quiet, holds, half_life_h
        )
        summaries.append(summary)
        print(json.dumps(summary), file=stdout, flush=True)
    print("\n" + table(summaries), file=stdout)
    if args.out is not None:
        write_summary(args.out, summaries)
        write_records(args.out, states)
        if not args.no_plots:
            from allocator.sim.plots import write_plots  # matplotlib is slow to import; only when asked

            write_plots(args.out, states)
    return summaries


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simulate", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        run(args, stdout or sys.stdout)
    except InputError as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    return 0
