"""The clearing's knobs have one set of defaults, allocator.book.Policy's: the platform's policy row, the
simulator's market and the round's book all start from them (a copy once drifted and skewed every replay)."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest
from django.db.models import Field

from allocator.book import Policy
from allocator.sim.policies.market import MarketOptions
from market.models import MarketPolicy
from market.selectors.policy import market_policy


def test_every_knob_of_the_clearing_is_a_policy_column_with_its_default() -> None:
    for knob in fields(Policy):
        column = MarketPolicy._meta.get_field(knob.name)
        assert isinstance(column, Field), knob.name
        assert column.default == getattr(Policy(), knob.name), knob.name


def test_the_simulator_starts_from_the_same_knobs() -> None:
    assert MarketOptions().round_policy() == Policy()


@pytest.mark.django_db
def test_a_fresh_platform_clears_with_the_default_policy() -> None:
    assert market_policy().book_policy() == Policy()


@pytest.mark.django_db
def test_the_mapping_passes_every_knob() -> None:
    row = market_policy()
    changed = {"min_runtime_s": 1, "starve_rounds": 2, "price_step_bp": 3, "max_reservations": 4}
    changed |= {
        "max_reserved_pct": 5,
        "fair_reclaim": 0,
        "fair_share_half_life_s": 6,
        "fair_share_payback_s": 7,
    }
    changed |= {
        "max_moves": 8,
        "move_min_runtime_s": 9,
        "move_max_lost_gpu_s": 10,
        "move_cooldown_s": 11,
        "move_restart_s": 12,
    }
    assert set(changed) == {f.name for f in fields(Policy)}
    for name, value in changed.items():
        setattr(row, name, value)
    assert asdict(row.book_policy()) == changed | {"fair_reclaim": False}
