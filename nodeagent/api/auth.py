"""`Authorization: Bearer gpn_…` (a node credential) or `gpb_…` (a bootstrap token, register only) for the
agent API (docs/agent.md §Protocol). A forged, used or revoked secret is 401."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from inventory.models import Node
from nodeagent import credentials
from nodeagent.models import BootstrapToken
from nodeagent.services.registration import bootstrap_token_usable


@dataclass(frozen=True)
class Agent:
    """request.user for agent requests: a registered node, or the holder of a bootstrap token."""

    node: Node | None = None
    bootstrap: BootstrapToken | None = None
    raw: str = ""
    is_authenticated: bool = True

    @property
    def pk(self) -> str:  # the throttle's cache key
        return (
            f"node:{self.node.pk}" if self.node else f"bootstrap:{self.bootstrap.pk if self.bootstrap else 0}"
        )


def agent_of(request: Request) -> Agent:
    """request.user on an agent endpoint. DRF's stubs type it as a User; NodeAuthentication sets an Agent."""
    agent: object = request.user
    if not isinstance(agent, Agent):
        raise exceptions.NotAuthenticated()
    return agent


class NodeAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        raw = raw.strip()
        if scheme.lower() != self.keyword.lower() or not raw or " " in raw:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: expected 'Bearer <secret>'."
            )
        kind = credentials.kind_of(raw)
        if kind == "node":
            node = (
                Node.objects.select_related("gpu_type")
                .filter(credential_digest=credentials.digest(raw))
                .first()
            )
            if node is None:
                raise exceptions.AuthenticationFailed("Invalid or revoked node credential.")
            return Agent(node=node), node
        if kind == "bootstrap":
            token = bootstrap_token_usable(raw=raw)
            if token is None:
                raise exceptions.AuthenticationFailed("Invalid, used or expired bootstrap token.")
            return Agent(bootstrap=token, raw=raw), token
        raise exceptions.AuthenticationFailed("Not an agent secret: expected gpn_… or gpb_….")

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class IsNode(BasePermission):
    """A node credential: every agent endpoint but register."""

    message = "This needs a node credential (gpn_…); a bootstrap token is good only for register."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Node)


class AgentAuthScheme(OpenApiAuthenticationExtension):
    target_class = "nodeagent.api.auth.NodeAuthentication"
    name = "agentAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A node credential `Bearer gpn_…`, or for register a bootstrap token `gpb_…`.",
        }
