"""The simulator's market runs the platform's round rules unless told otherwise."""

from __future__ import annotations

from dataclasses import asdict
from typing import TypedDict

from allocator.book import Policy as RoundPolicy
from allocator.sim.policies.market import MarketOptions


def test_default_options_give_the_allocators_default_round_policy() -> None:
    # A copied default drifted once (max_reservations 4 here against the allocator's 1), and every replay,
    # docs/simulator.md's tables included, reserved four gangs' nodes per type.
    assert asdict(MarketOptions().round_policy()) == asdict(RoundPolicy())


class _Knobs(TypedDict, total=False):
    price_step_bp: int
    min_runtime_s: int
    starve_rounds: int
    max_reservations: int
    max_reserved_pct: int
    fair_reclaim: bool


def test_every_round_knob_is_passed_through() -> None:
    knobs: _Knobs = {"price_step_bp": 250, "min_runtime_s": 60, "starve_rounds": 2, "max_reservations": 3}
    knobs |= {"max_reserved_pct": 25, "fair_reclaim": False}
    assert asdict(MarketOptions(**knobs).round_policy()) == asdict(RoundPolicy(**knobs))
