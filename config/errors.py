"""Errors every layer may raise. They live in config, the bottom layer, so raising one imports nothing above it.

PolicyError is the project-wide field error: services raise it with the offending input's name, and the API
and portal turn it into a field error under that name.
"""

from __future__ import annotations


class PolicyError(ValueError):
    """A policy change that would break a rule; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
