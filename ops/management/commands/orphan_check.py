"""`manage.py orphan_check`: no row points at nothing through a key the database does not enforce; exit 1
naming each culprit."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ops.integrity import orphans, unchecked_keys


class Command(BaseCommand):
    help = (
        "Check every foreign key declared without a database constraint (leases, lease GPUs, commands, bid "
        "outcomes): no row may name a row that does not exist."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        found = orphans()
        if found:
            for problem in found:
                self.stdout.write(problem.what)
            raise CommandError(f"orphan check failed: {len(found)} key(s) with orphans")
        self.stdout.write(f"orphans: none over {len(unchecked_keys())} unenforced key(s)")
