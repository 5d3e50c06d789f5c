"""Reads for what-if runs that reach outside whatif's own tables."""

from __future__ import annotations

from django.db.models import QuerySet

from market.models import PolicyVersion
from whatif.policy import RUN_KEY


def versions_from_run(*, run_id: int) -> QuerySet[PolicyVersion]:
    """The proposed versions saved from this run (whatif_propose names the run in their `detail`)."""
    return PolicyVersion.objects.filter(**{f"detail__{RUN_KEY}": run_id}).order_by("-number")
