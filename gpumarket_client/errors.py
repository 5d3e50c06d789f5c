"""The client's errors, each with the command line's exit code (docs/cli.md §Exit codes)."""

from __future__ import annotations

from typing import Any

# Exit codes scripts can test. A job's own exit code (submit --wait) passes through as it is.
EXIT_OK = 0
EXIT_ERROR = 1  # any other failure
EXIT_USAGE = 2  # a bad option or argument (click's own code for usage errors)
EXIT_API = 3  # the API refused the request (4xx): the message names the field
EXIT_AUTH = 4  # not signed in, or the token was refused (401/403)
EXIT_NOT_FOUND = 5  # no such job, node or version (404)
EXIT_CONNECTION = 6  # the server could not be reached, or answered 5xx after the retries
EXIT_JOB_FAILED = 7  # submit --wait / wait: the job ended without an exit code (cancelled, expired, lost)


class ClientError(Exception):
    """Base of every error the client raises; `exit_code` is what the command line exits with."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotSignedIn(ClientError):
    exit_code = EXIT_AUTH


class ConnectionFailed(ClientError):
    exit_code = EXIT_CONNECTION


class ApiError(ClientError):
    """The API's error body {"error": code, "detail": text, "fields": {name: [messages]}}.

    `code` is the API's error code (`invalid`, `not_found`, `idempotency_key_reused`, ...), `field` the first
    field it names (None when it names none), `fields` all of them."""

    def __init__(
        self, status: int, code: str, detail: str, fields: dict[str, list[str]] | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.fields = fields or {}
        self.field = next(iter(self.fields), None)
        self.exit_code = _exit_code(status)

    @classmethod
    def from_response(cls, status: int, body: Any) -> ApiError:
        if not isinstance(body, dict):
            return cls(status, "error", f"HTTP {status}: the server answered without an error body")
        fields = body.get("fields")
        clean = (
            {str(k): [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in fields.items()}
            if isinstance(fields, dict)
            else {}
        )
        return cls(status, str(body.get("error", "error")), str(body.get("detail", f"HTTP {status}")), clean)

    def __str__(self) -> str:
        return self.detail


def _exit_code(status: int) -> int:
    if status in (401, 403):
        return EXIT_AUTH
    if status == 404:
        return EXIT_NOT_FOUND
    if status >= 500:
        return EXIT_CONNECTION
    return EXIT_API
