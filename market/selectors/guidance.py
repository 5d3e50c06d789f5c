"""What a bid at a given limit is likely to get, per GPU type (ARCHITECTURE.md §Clearing, steps 1-4).

A forecast from today's prices and the team's unused guarantee, not a promise: the round decides on the book
it freezes. The submit form shows it beside the prices.
"""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import Tenant
from config.money import format_fixed
from inventory.models import GpuType
from market.models import RoundPrice
from market.selectors.policy import tenant_policy

RECENT_ROUNDS = 5


@dataclass(frozen=True)
class Guidance:
    gpu_type: str
    reserve: int
    posted: int
    unused_guarantee: int
    recent_spot: list[int]  # the newest rounds' spot prices that had a spot winner, newest first
    limit: int | None
    tier: str | None  # "G", "B", "S", or None when the limit cannot win
    advice: str


def recent_spot(gpu_type: GpuType) -> list[int]:
    rows = RoundPrice.objects.filter(gpu_type=gpu_type, spot__isnull=False).order_by("-round__slot")
    return [s for s in rows.values_list("spot", flat=True)[:RECENT_ROUNDS] if s is not None]


def bid_guidance(*, tenant: Tenant, gpu_type: GpuType, limit: int | None, gpus: int = 1) -> Guidance:
    policy = tenant_policy(tenant=tenant)
    held = sum(n for (name, _tier), n in policy.held.items() if name == gpu_type.name)
    unused = max(policy.guarantees.get(gpu_type.name, 0) - held, 0)
    r, p = gpu_type.reserve_price, gpu_type.current_posted
    spot = recent_spot(gpu_type)
    tier: str | None
    if limit is None:
        tier, advice = (
            None,
            f"Enter a limit: the reserve is {format_fixed(r)}, the posted price {format_fixed(p)}.",
        )
    elif limit < r:
        tier, advice = None, f"Below the reserve price {format_fixed(r, up=True)}: this bid cannot win."
    elif unused >= gpus:
        tier = "G"
        advice = (
            f"Tier G (guaranteed) at the reserve price {format_fixed(r)}: your team has {unused} unused "
            f"guaranteed {gpu_type.name} GPUs; never preempted."
        )
    elif limit >= p:
        tier = "B"
        advice = (
            f"Tier B (borrowed) at the posted price {format_fixed(p)} while your team is within its weighted "
            "share of the excess; beyond it, spot. Borrowed GPUs may be reclaimed after the minimum runtime."
        )
    else:
        tier = "S"
        recent = ", ".join(format_fixed(s) for s in spot) or "none yet"
        advice = (
            f"Tier S (spot) if GPUs are left after the guaranteed and borrowed tiers; it pays at most your limit "
            f"and never above the posted price {format_fixed(p)}. Recent spot prices: {recent}. Preemptible."
        )
    return Guidance(gpu_type.name, r, p, unused, spot, limit, tier, advice)
