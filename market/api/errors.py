"""The one translation of the services' refusals into answers, for the API and the portal (issue 26 §4).

A refusal either names an input (PolicyError, a ledger amount or key): the API answers 400 with the field in
`fields`, the portal shows the message beside that field; or it refuses the request as a whole (a JobError, a
LedgerError): the API answers with the service's `code` and the status below, the portal shows the message
where the form puts such errors. Before, the API's job, ledger, policy and GPU-type views and the portal's
job and console views each wrote this mapping themselves. nodeagent keeps its own (nodeagent/api/errors.py):
the agents' protocol, not people's forms.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import exceptions, serializers, status

from config.errors import PolicyError
from config.idempotency import IdempotencyKeyReused
from market.services import jobs, ledger
from market.services.canary import CanaryConflict

ServiceError = PolicyError | jobs.JobError | ledger.LedgerError | CanaryConflict

# The first match wins: a subclass before its base.
_STATUS: list[tuple[type[Exception], int]] = [
    (jobs.NotPermitted, status.HTTP_403_FORBIDDEN),
    (jobs.JobError, status.HTTP_409_CONFLICT),
    (ledger.NotPermitted, status.HTTP_403_FORBIDDEN),
    (ledger.UnknownHold, status.HTTP_404_NOT_FOUND),
    (ledger.KeyConflict, status.HTTP_409_CONFLICT),
    (ledger.InsufficientFunds, status.HTTP_409_CONFLICT),
    (ledger.HoldClosed, status.HTTP_409_CONFLICT),
    (CanaryConflict, status.HTTP_409_CONFLICT),
]


@dataclass(frozen=True)
class Refusal:
    field: str | None  # the input it names; None: the request as a whole
    message: str
    status: int
    code: str


def refusal(exc: ServiceError) -> Refusal:
    if isinstance(exc, IdempotencyKeyReused):  # a PolicyError, but of the request as a whole: 409
        return Refusal(None, exc.message, status.HTTP_409_CONFLICT, exc.code)
    if isinstance(exc, PolicyError):
        return Refusal(exc.field, exc.message, status.HTTP_400_BAD_REQUEST, "invalid")
    if isinstance(exc, ledger.InvalidAmount | ledger.InvalidKey):
        return Refusal(exc.field, str(exc), status.HTTP_400_BAD_REQUEST, "invalid")
    code = next((code for cls, code in _STATUS if isinstance(exc, cls)), status.HTTP_400_BAD_REQUEST)
    return Refusal(None, str(exc), code, exc.code)


class Refused(exceptions.APIException):
    """A refusal of the request as a whole, keeping the service's code."""

    def __init__(self, found: Refusal, *, field: str | None = None) -> None:
        super().__init__(detail=found.message, code=found.code)
        self.status_code = found.status
        self.field = field  # the input it is about, named in the body's `fields` (a reused key's header)


def api_exception(exc: ServiceError) -> exceptions.APIException:
    """What an API view raises for a service's refusal; config.api.exception_handler writes the body."""
    found = refusal(exc)
    if found.field is not None:
        return serializers.ValidationError({found.field: [found.message]})
    return Refused(found, field=exc.field if isinstance(exc, IdempotencyKeyReused) else None)


def form_errors(exc: ServiceError, *, whole: str = "form") -> dict[str, str]:
    """What a portal form shows for a service's refusal: {field: message}; a refusal of the request as a whole
    goes under `whole` (the form's own error, or the field the page shows such errors beside)."""
    found = refusal(exc)
    return {found.field or whole: found.message}
