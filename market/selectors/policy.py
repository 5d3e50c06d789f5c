"""Reads of market-wide policy."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Max

from market.models import MarketPolicy, Round


def market_policy() -> MarketPolicy:
    """The policy row, created with the defaults (round period from ROUND_SECONDS) on first use."""
    policy, _ = MarketPolicy.objects.get_or_create(
        singleton=1, defaults={"round_seconds": settings.ROUND_SECONDS}
    )
    return policy


def current_fence() -> int:
    """The fencing number for commands written now: the newest round's id (0 before the first round)."""
    return int(Round.objects.aggregate(top=Max("pk"))["top"] or 0)
