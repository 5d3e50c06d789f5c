"""`manage.py ledger_check`: verify the ledger against its postings; exit 1 naming each culprit."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from market.selectors.ledger import ledger_problems, ledger_size


class Command(BaseCommand):
    help = (
        "Check that every journal entry sums to zero, every cached balance equals the sum of its postings, "
        "no tenant account is negative and every held account equals its open holds."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        problems = ledger_problems()
        entries, accounts = ledger_size()
        if problems:
            for problem in problems:
                self.stdout.write(problem.what)
            raise CommandError(f"ledger check failed: {len(problems)} problem(s) in {entries} entries")
        self.stdout.write(f"ledger ok: {entries} entries, {accounts} accounts")
