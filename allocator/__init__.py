"""The clearing mechanism as pure functions over numpy arrays (ARCHITECTURE.md §Clearing). No Django here.

from allocator import Book, clear
result = clear(book)          # Result: winners, losers, preemptions, posted prices, digest
"""

from allocator.book import (
    MICRO,
    NO_PRICE,
    TIER_B,
    TIER_G,
    TIER_NAMES,
    TIER_S,
    Bids,
    Book,
    GpuTypes,
    Leases,
    Nodes,
    Policy,
    Tenants,
    hold_of,
)
from allocator.errors import BookError
from allocator.reference import clear
from allocator.result import (
    BACKFILL_DUE,
    BELOW_RESERVE,
    FAIR_SHARE,
    GUARANTEE_FULL,
    MOVED,
    NO_FIT,
    OUTBID,
    OVER_BUDGET,
    PREEMPT_NAMES,
    REASON_NAMES,
    RECLAIM,
    Losers,
    Moves,
    Preemptions,
    Result,
    WinnerRecord,
    Winners,
)

__all__ = [
    "BACKFILL_DUE",
    "BELOW_RESERVE",
    "FAIR_SHARE",
    "GUARANTEE_FULL",
    "MICRO",
    "MOVED",
    "NO_FIT",
    "NO_PRICE",
    "OUTBID",
    "OVER_BUDGET",
    "PREEMPT_NAMES",
    "REASON_NAMES",
    "RECLAIM",
    "TIER_B",
    "TIER_G",
    "TIER_NAMES",
    "TIER_S",
    "Bids",
    "Book",
    "BookError",
    "GpuTypes",
    "Leases",
    "Losers",
    "Moves",
    "Nodes",
    "Policy",
    "Preemptions",
    "Result",
    "Tenants",
    "WinnerRecord",
    "Winners",
    "clear",
    "hold_of",
]
