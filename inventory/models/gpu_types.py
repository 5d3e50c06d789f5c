"""GPU types and their price bounds."""

from __future__ import annotations

from django.db import models


class GpuType(models.Model):
    """A kind of GPU, priced per GPU-hour in integer micro-credits (ARCHITECTURE.md §Money)."""

    name = models.CharField(max_length=64, unique=True)
    memory_gb = models.PositiveIntegerField()
    reserve_price = models.BigIntegerField(help_text="Lowest price per GPU-hour, micro-credits.")
    max_price = models.BigIntegerField(help_text="Highest posted price per GPU-hour, micro-credits.")
    # Set by each committed round (allocator step 7); null until the first, meaning the reserve price.
    posted_price = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        # The table market created before the inventory carve-out (issue 26): data stays where it is.
        db_table = "market_gputype"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reserve_price__gte=0), name="gputype_reserve_nonnegative"
            ),
            models.CheckConstraint(
                condition=models.Q(max_price__gte=models.F("reserve_price")), name="gputype_max_ge_reserve"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def current_posted(self) -> int:
        """The posted price the next round starts from, within the current bounds."""
        return min(max(self.posted_price or self.reserve_price, self.reserve_price), self.max_price)
