"""Refusals of the agent and node-admin services; the API turns each into its JSON error."""

from __future__ import annotations


class NodeError(Exception):
    """A request the rules refuse. `code` is the API's error code, `field` names the input at fault (a 400)
    or is None (a 409: the request is fine, the state forbids it)."""

    code = "refused"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code
