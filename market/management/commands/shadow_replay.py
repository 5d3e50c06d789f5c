"""`manage.py shadow_replay N [--rounds K]`: what a policy version would have changed in the rounds whose books are
still kept, as shadow rounds would have recorded it (docs/rounds.md §Shadow rounds), printed as JSON. Writes
nothing: a proposal can be judged on the recent past before it runs in shadow."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from market.models import PolicyVersion
from market.selectors.shadow import compliance, shadow_replay


class Command(BaseCommand):
    help = "Clear the kept rounds' books under a policy version and print what would have differed (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("version", type=int, help="the policy version's number")
        parser.add_argument("--rounds", type=int, help="only the newest this many rounds (default: all kept)")

    def handle(self, *args: Any, **options: Any) -> None:
        version = PolicyVersion.objects.filter(number=options["version"]).first()
        if version is None:
            raise CommandError(f"no policy version {options['version']}")
        if options["rounds"] is not None and options["rounds"] < 1:
            raise CommandError("--rounds must be at least 1")
        totals = shadow_replay(version=version, rounds=options["rounds"])
        s = totals.summary
        out = {
            "version": version.number,
            **asdict(totals),
            "compliance": {
                "live": compliance(s["fair_complied_live"], s["fair_counted_live"]),
                "proposed": compliance(s["fair_complied_proposed"], s["fair_counted_proposed"]),
            },
        }
        self.stdout.write(json.dumps(out, indent=1))
