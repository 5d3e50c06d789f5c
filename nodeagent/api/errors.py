"""NodeError as the API's JSON error: a named field is a 400, anything else a 409 with the service's code."""

from __future__ import annotations

from rest_framework import exceptions, serializers, status

from nodeagent.errors import NodeError


class NodeConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT

    def __init__(self, exc: NodeError) -> None:
        super().__init__(detail=exc.message, code=exc.code)


def refused(exc: NodeError) -> exceptions.APIException:
    if exc.field is not None and exc.code == "refused":
        return serializers.ValidationError({exc.field: [exc.message]})
    return NodeConflict(exc)
