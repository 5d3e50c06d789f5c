"""Market-wide policy: one row, changed by platform admins through market.services.policy."""

from __future__ import annotations

from dataclasses import fields

from django.db import models

from allocator.book import Policy

# The clearing's own defaults, so the platform and the simulator start from the same knobs.
_BOOK = Policy()

DAY = 86_400

# Inclusive bounds (what market.services.policy accepts and the policy snapshot reads) of each market-wide knob; the API builds its fields from this table.
POLICY_LIMITS: dict[str, tuple[int, int]] = {
    "round_seconds": (10, DAY),
    "price_step_bp": (1, 5_000),
    "min_runtime_s": (0, 7 * DAY),
    "default_grace_s": (0, 3_600),
    "starve_rounds": (1, 1_000),
    "max_reservations": (0, 1_000),
    "max_reserved_pct": (1, 100),
    "fair_reclaim": (0, 1),
    # 0: no history; at most 30 days (a longer memory would let last month's use decide today's round).
    "fair_share_half_life_s": (0, 30 * DAY),
    # Paid back over at least a minute (the clearing divides by it), at most a week.
    "fair_share_payback_s": (60, 7 * DAY),
    # Consolidation (allocator/reference/consolidate.py): moves a round, and what a move may cost.
    "max_moves": (0, 1_000),
    "move_min_runtime_s": (0, 7 * DAY),
    "move_max_lost_gpu_s": (0, 1_000 * DAY),
    "move_cooldown_s": (0, 7 * DAY),
    "move_restart_s": (0, DAY),
    "retention_days": (1, 3_650),
    "energy_price_kwh": (0, 1_000_000_000),
    "idle_util_pct": (0, 100),
    "idle_seconds": (60, 7 * DAY),
    # The fleet's agent reports per second (docs/agent.md §Pacing): at least 1, at most 100,000.
    "agent_report_budget_rps": (1, 100_000),
}
WEIGHT_LIMITS = (1, 1_000_000)
GUARANTEE_MAX = 1_000_000


class MarketPolicy(models.Model):
    """The knobs of the clearing and the rounds. The clearing's knobs default to allocator.book.Policy's own
    values (read here, never copied); the others to settings or literals of their own."""

    singleton = models.PositiveSmallIntegerField(default=1, unique=True, editable=False)
    round_seconds = models.PositiveIntegerField(help_text="Seconds between round starts.")
    price_step_bp = models.PositiveIntegerField(
        default=_BOOK.price_step_bp, help_text="Posted price step, basis points."
    )
    min_runtime_s = models.PositiveIntegerField(
        default=_BOOK.min_runtime_s, help_text="A younger lease is never preempted."
    )
    default_grace_s = models.PositiveIntegerField(default=120, help_text="SIGTERM to SIGKILL, by default.")
    starve_rounds = models.PositiveIntegerField(
        default=_BOOK.starve_rounds, help_text="Rounds before a gang gets reserved nodes."
    )
    max_reservations = models.PositiveIntegerField(
        default=_BOOK.max_reservations,
        help_text="Blocked gangs (of the most-owed tenant, or starving) given reserved nodes, per type and round.",
    )
    max_reserved_pct = models.PositiveIntegerField(
        default=_BOOK.max_reserved_pct,
        help_text="At most this share of a type's nodes is reserved for blocked gangs at once (%).",
    )
    fair_reclaim = models.PositiveSmallIntegerField(
        default=int(_BOOK.fair_reclaim),
        help_text="1: a tenant below its entitlement may preempt leases of tenants above theirs; 0: off.",
    )
    fair_share_half_life_s = models.PositiveIntegerField(
        default=_BOOK.fair_share_half_life_s,
        help_text="Half-life of the fair-share history (GPU-hours owed); 0: no history, each round afresh.",
    )
    fair_share_payback_s = models.PositiveIntegerField(
        default=_BOOK.fair_share_payback_s,
        help_text="What a tenant is owed is paid back over this time (owed GPU-hours / it add to entitlement).",
    )
    max_moves = models.PositiveIntegerField(
        default=_BOOK.max_moves,
        help_text="Running jobs moved per round at most to make room for a blocked gang; 0: no moves.",
    )
    move_min_runtime_s = models.PositiveIntegerField(
        default=_BOOK.move_min_runtime_s, help_text="A lease younger than this is never moved."
    )
    move_max_lost_gpu_s = models.PositiveIntegerField(
        default=_BOOK.move_max_lost_gpu_s,
        help_text="Never move a lease that would lose more GPU-seconds of work since its last checkpoint.",
    )
    move_cooldown_s = models.PositiveIntegerField(
        default=_BOOK.move_cooldown_s, help_text="A node moved from or to is left alone this long."
    )
    move_restart_s = models.PositiveIntegerField(
        default=_BOOK.move_restart_s,
        help_text="What a move costs per GPU (stop, checkpoint, start); moves happen only when cheaper than waiting.",
    )
    retention_days = models.PositiveIntegerField(
        default=30,
        help_text="Days a round's book, per-bid outcomes and acknowledged commands are kept (summaries stay).",
    )
    energy_price_kwh = models.BigIntegerField(
        default=0, help_text="Micro-credits per measured kWh, added to a lease's charge; 0: none."
    )
    idle_util_pct = models.PositiveIntegerField(
        default=0, help_text="A lease whose GPUs stay below this utilisation is released; 0: off."
    )
    idle_seconds = models.PositiveIntegerField(default=1800, help_text="How long below idle_util_pct.")
    agent_report_budget_rps = models.PositiveIntegerField(
        default=50,
        help_text="Agent reports per second the fleet may send together; each agent's interval follows "
        "(nodeagent/services/pacing.py).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "market policy"
        constraints = [
            models.CheckConstraint(condition=models.Q(singleton=1), name="market_policy_singleton")
        ]

    def __str__(self) -> str:
        return "market policy"

    def book_policy(self) -> Policy:
        """The clearing's knobs as the allocator takes them: one mapping, by Policy's own field names (a
        knob added to Policy needs a column of the same name here, which tests/market/test_policy_defaults.py
        checks)."""
        return Policy(
            **{
                f.name: bool(value) if isinstance(getattr(_BOOK, f.name), bool) else value
                for f in fields(Policy)
                for value in [getattr(self, f.name)]
            }
        )
