"""A policy as a what-if compares it: the knobs an admin may change, as one JSON-able dict.

    {"price_step_bp": 500, "min_runtime_s": 600, "starve_rounds": 5, "max_reservations": 1,
     "max_reserved_pct": 10, "fair_reclaim": true, "fair_share_half_life_s": 86400,
     "fair_share_payback_s": 7200, "checkpoint_min": 0,
     "types": {"H100": {"reserve": 2000000, "max": 20000000}, ...},          # micro-credits per GPU-hour
     "tenants": {"vision": {"weight": 2, "guarantees": {"H100": 4}}, ...}}

`today_policy` reads the platform's; `policy_check` checks a proposal with the same bounds the policy services
enforce (market.services.policy, inventory.services.gpu_types), naming the console form's field.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accounts.models import Tenant
from allocator.sim.policies.market import MarketOptions
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from inventory.models import GpuType
from market.models import Guarantee
from market.models.policy import GUARANTEE_MAX, POLICY_LIMITS, WEIGHT_LIMITS
from market.selectors.policy import market_policy
from whatif.trace import Trace

Policy = dict[str, Any]
# The market-wide knobs a proposal may change; the others (round period, grace, ...) stay today's.
KNOBS = ("price_step_bp", "min_runtime_s", "fair_share_half_life_s")
FIXED_KNOBS = (
    "starve_rounds",
    "max_reservations",
    "max_reserved_pct",
    "fair_share_payback_s",
    "max_moves",
    "move_min_runtime_s",
    "move_max_lost_gpu_s",
    "move_cooldown_s",
    "move_restart_s",
)
# Not a platform knob but an assumption about the workload, which a proposal may change to see what it would
# cost: every job checkpoints every this many minutes, and a preempted job redoes the work since its last
# (allocator/sim/scenario.py; 0 = a preempted job loses nothing). Today's side assumes none; never applied.
CHECKPOINT_LIMITS = (0, 7 * 24 * 60)
# The key in a proposed version's `detail` that names the what-if run it was saved from.
RUN_KEY = "whatif_run"


def today_policy() -> Policy:
    policy = market_policy()
    tenants: dict[str, Any] = {
        t.slug: {"weight": t.weight, "guarantees": {}} for t in Tenant.objects.filter(active=True)
    }
    rows = Guarantee.objects.filter(tenant__active=True, gpus__gt=0).order_by("gpu_type__name")
    for slug, type_name, gpus in rows.values_list("tenant__slug", "gpu_type__name", "gpus"):
        tenants[slug]["guarantees"][type_name] = gpus
    return {
        **{k: getattr(policy, k) for k in (*KNOBS, *FIXED_KNOBS)},
        "fair_reclaim": bool(policy.fair_reclaim),
        "checkpoint_min": 0,
        "types": {t.name: {"reserve": t.reserve_price, "max": t.max_price} for t in GpuType.objects.all()},
        "tenants": dict(sorted(tenants.items())),
    }


def _whole(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(field, "must be a whole number")
    if not low <= value <= high:
        raise PolicyError(field, f"must be between {low} and {high}")
    return value


def policy_check(proposal: Policy, *, base: Policy, capacity: dict[str, int]) -> None:
    """PolicyError for the first bad value; the proposal must name exactly the types and tenants of `base`.
    `capacity`: GPUs per type the replay's cluster has (guarantees of a type must fit in it)."""
    for knob in KNOBS:
        _whole(knob, proposal.get(knob), *POLICY_LIMITS[knob])
    if not isinstance(proposal.get("fair_reclaim"), bool):
        raise PolicyError("fair_reclaim", "must be on or off")
    _whole("checkpoint_min", proposal.get("checkpoint_min"), *CHECKPOINT_LIMITS)
    types = proposal.get("types")
    if not isinstance(types, dict) or set(types) != set(base["types"]):
        raise PolicyError("types", "must give prices for exactly today's GPU types")
    for name, prices in types.items():
        reserve = _whole(f"reserve-{name}", prices.get("reserve"), 0, MAX_AMOUNT)
        if _whole(f"max-{name}", prices.get("max"), 0, MAX_AMOUNT) < reserve:
            raise PolicyError(f"max-{name}", "must be at least the reserve price")
    tenants = proposal.get("tenants")
    if not isinstance(tenants, dict) or set(tenants) != set(base["tenants"]):
        raise PolicyError("tenants", "must give a weight and guarantees for exactly today's tenants")
    for slug, t in tenants.items():
        _whole(f"weight-{slug}", t.get("weight"), *WEIGHT_LIMITS)
        guarantees = t.get("guarantees")
        if not isinstance(guarantees, dict) or not set(guarantees) <= set(types):
            raise PolicyError(f"guarantees-{slug}", "must name today's GPU types")
        for name, gpus in guarantees.items():
            _whole(f"guarantee-{slug}-{name}", gpus, 0, GUARANTEE_MAX)
    for name in types:
        total = sum(t["guarantees"].get(name, 0) for t in tenants.values())
        # A type without nodes in the window is not replayed, so its guarantees are not checked here.
        if name in capacity and total > capacity[name]:
            raise PolicyError(
                f"guarantees-{name}",
                f"guarantees of {name} add up to {total} GPUs, more than the {capacity[name]} "
                "the cluster had in this window",
            )


def market_options(policy: Policy) -> MarketOptions:
    return MarketOptions(
        price_step_bp=policy["price_step_bp"],
        min_runtime_s=policy["min_runtime_s"],
        starve_rounds=policy["starve_rounds"],
        max_reservations=policy["max_reservations"],
        # absent from what-ifs stored before it was modelled: the allocator's default, as they ran
        max_reserved_pct=policy.get("max_reserved_pct", MarketOptions.max_reserved_pct),
        max_price_micro=tuple((name, p["max"]) for name, p in sorted(policy["types"].items())),
        fair_reclaim=policy["fair_reclaim"],
        # absent from what-ifs stored before fair share had a history: the clearing's defaults
        fair_share_half_life_s=policy.get("fair_share_half_life_s", MarketOptions.fair_share_half_life_s),
        fair_share_payback_s=policy.get("fair_share_payback_s", MarketOptions.fair_share_payback_s),
        # absent from what-ifs stored before consolidation: the clearing's defaults
        **{k: policy[k] for k in MOVE_KNOBS if k in policy},
    )


MOVE_KNOBS = ("max_moves", "move_min_runtime_s", "move_max_lost_gpu_s", "move_cooldown_s", "move_restart_s")


def trace_under(trace: Trace, policy: Policy) -> Trace:
    """The same workload on the same cluster with the policy's weights, guarantees and reserve prices.
    A tenant the policy does not name (inactive now, but with jobs in the window) keeps the trace's."""
    pools = {p.gpu_type for p in trace.pools}
    tenants = []
    for t in trace.tenants:
        chosen = policy["tenants"].get(t.name)
        if chosen is None:
            tenants.append(t)
            continue
        guaranteed = {k: v for k, v in sorted(chosen["guarantees"].items()) if k in pools and v > 0}
        tenants.append(replace(t, weight=chosen["weight"], guaranteed=guaranteed))
    reserve = {
        k: policy["types"][k]["reserve"] if k in policy["types"] else v
        for k, v in trace.reserve_micro.items()
    }
    return replace(
        trace, tenants=tuple(tenants), reserve_micro=reserve, checkpoint_min=policy.get("checkpoint_min", 0)
    )


def proposal_snapshot(proposal: Policy) -> dict[str, Any]:
    """The proposal as a partial policy snapshot (market.selectors.policy_snapshot's shape), what
    market.services.policy_proposals.policy_version_propose lays over the policy in force.

    Only what a what-if proposes is named: its knobs, each type's price bounds and each tenant's weight and
    guarantees; the rest (round period, guardrails, allowances, ...) stays as in force when it is proposed.
    `checkpoint_min` is an assumption about the workload, not policy, so it is left out. A tenant's
    guarantees name every type of the proposal, 0 where it proposes none, because the snapshot merges
    guarantees by type: without the 0 a guarantee the proposal dropped would survive the merge."""
    types = proposal["types"]
    market: dict[str, int] = {k: proposal[k] for k in KNOBS if k in proposal}
    market["fair_reclaim"] = int(proposal["fair_reclaim"])  # the policy stores the switch as 0 or 1
    return {
        "market": market,
        "gpu_types": {
            name: {"reserve_price": p["reserve"], "max_price": p["max"]} for name, p in sorted(types.items())
        },
        "tenants": {
            slug: {
                "weight": t["weight"],
                "guarantees": {
                    name: t["guarantees"].get(name, 0) for name in sorted(set(types) | set(t["guarantees"]))
                },
            }
            for slug, t in sorted(proposal["tenants"].items())
        },
    }
