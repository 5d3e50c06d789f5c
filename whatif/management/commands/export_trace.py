"""`python manage.py export_trace --since WHEN [--until WHEN] OUT.toml [--anonymise]`: the platform's own
history in the simulator's scenario format (docs/whatif.md), ready for `manage.py simulate OUT.toml`."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from whatif.history import HistoryError, Window, history_trace
from whatif.trace import anonymised, jobs_path_of, write_trace


def moment(text: str) -> datetime:
    """An ISO date or date-time; without a zone it is UTC. argparse turns a ValueError into a usage error."""
    text = text.strip()
    try:
        parsed = parse_datetime(text)
    except ValueError:
        parsed = None
    if parsed is None:
        try:
            day = parse_date(text)
        except ValueError:
            day = None
        if day is None:
            raise argparse.ArgumentTypeError(f"not an ISO date or date-time: {text!r}")
        parsed = datetime(day.year, day.month, day.day)
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


def toml_path(text: str) -> Path:
    path = Path(text)
    if path.suffix != ".toml" or path.is_dir():
        raise argparse.ArgumentTypeError(
            f"OUT must be a .toml file path (the jobs CSV goes beside it): {text!r}"
        )
    return path


class Command(BaseCommand):
    help = "Write the jobs submitted in a window, with the cluster and tenants, as a simulator scenario."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--since", type=moment, required=True, help="window start (ISO date or date-time)"
        )
        parser.add_argument("--until", type=moment, help="window end, exclusive (default: now)")
        parser.add_argument("out", type=toml_path, metavar="OUT", help="scenario file to write (NAME.toml)")
        parser.add_argument(
            "--anonymise", action="store_true", help="tenants as tenant-NN and jobs as jNNNNNN"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        window = Window(options["since"], options["until"] or timezone.now())
        if window.until <= window.since:
            usage = self.create_parser("manage.py", "export_trace").format_usage().strip()
            raise CommandError(f"{usage}\nexport_trace: error: --until must be after --since", returncode=2)
        try:
            trace = history_trace(window)
        except HistoryError as exc:
            raise CommandError(f"export_trace: {exc}") from exc
        if options["anonymise"]:
            trace = anonymised(trace)
        out = write_trace(trace, options["out"])
        self.stdout.write(
            f"wrote {out} and {jobs_path_of(out).name}: {len(trace.jobs)} jobs, {len(trace.tenants)} tenants, "
            f"{sum(p.nodes for p in trace.pools)} nodes"
        )
