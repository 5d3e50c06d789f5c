"""`python manage.py simulate SCENARIO.toml ...`: the trace-replay simulator (docs/simulator.md).

Thin on purpose: the simulator lives in allocator/sim and imports no Django; this only forwards arguments.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from allocator.sim import cli
from allocator.sim.errors import InputError


class Command(BaseCommand):
    help = (
        "Replay a workload trace through the allocator and the baseline policies; print and plot the figures."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        keys = (
            "scenario", "policy", "out", "seed", "quiet", "restart_overhead", "no_plots", "holds", "max_hours", "budget",
            "checkpoint_min", "fair_share_half_life",
        )  # fmt: skip
        namespace = argparse.Namespace(**{key: options[key] for key in keys})
        try:
            cli.run(namespace, self.stdout)
        except InputError as exc:
            raise CommandError(str(exc)) from exc
