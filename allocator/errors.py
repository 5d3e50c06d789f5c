"""Errors of the allocator's public door."""

from __future__ import annotations


class BookError(ValueError):
    """A malformed book: ``field`` names where (``bids[3].gpus``), ``message`` says what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
