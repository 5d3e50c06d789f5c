"""Market models, one module per concept; Django finds them all through this package."""

from market.models.gpu_types import GpuType
from market.models.ledger import (
    Account,
    AccountKind,
    EntryKind,
    Hold,
    HoldState,
    JournalEntry,
    Posting,
)

__all__ = ["Account", "AccountKind", "EntryKind", "GpuType", "Hold", "HoldState", "JournalEntry", "Posting"]
