"""Nodes for platform admins: list them with their GPUs, drain, resume or retire one (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodeagent.errors import NodeError
from nodeagent.management.commands._admin import acting_admin
from nodeagent.selectors.nodes import node_list
from nodeagent.services import admin as services

ACTIONS = {"drain": services.node_drain, "resume": services.node_resume, "retire": services.node_retire}


class Command(BaseCommand):
    help = (
        "List nodes (`node list`), drain, resume or retire one (`node drain NAME`), or set its address "
        "(`node address NAME ADDRESS`; '' gives it back to the agent)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "address", *ACTIONS])
        parser.add_argument("name", nargs="?", help="the node (not for list)")
        parser.add_argument("address", nargs="?", help="for address: an IP address or a host name")
        parser.add_argument("--as", dest="actor", default=None, help="the platform admin acting (audited)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "list":
            self._list()
            return
        if not opts["name"]:
            raise CommandError(f"usage: manage.py node {opts['action']} NAME")
        node = node_list().filter(name=opts["name"]).first()
        if node is None:
            raise CommandError(f"no node named {opts['name']!r}")
        try:
            if opts["action"] == "address":
                if opts["address"] is None:
                    raise CommandError("usage: manage.py node address NAME ADDRESS ('' to unpin)")
                node = services.node_set_address(
                    node=node, actor=acting_admin(opts["actor"]), address=opts["address"]
                )
                self.stdout.write(f"{node.name}: address {node.address or '(none)'}")
                return
            node = ACTIONS[opts["action"]](node=node, actor=acting_admin(opts["actor"]))
        except NodeError as exc:
            raise CommandError(f"{exc.field}: {exc.message}" if exc.field else exc.message) from exc
        self.stdout.write(f"{node.name}: {node.state}")

    def _list(self) -> None:
        for node in node_list():
            seen = node.last_heartbeat.isoformat(timespec="seconds") if node.last_heartbeat else "never"
            self.stdout.write(
                f"{node.name}  {node.gpu_type.name}  {node.state}  domain={node.topology_domain}  "
                f"agent={node.agent_version or '-'}  address={node.address or '-'}"
                f"{' (pinned)' if node.address_pinned else ''}  last heartbeat {seen}"
            )
            for gpu in node.gpu_rows:  # type: ignore[attr-defined]  # set by a Prefetch(to_attr=...)
                health = "absent" if gpu.absent else "healthy" if gpu.healthy else f"UNHEALTHY {gpu.error}"
                self.stdout.write(f"  [{gpu.index}] {gpu.uuid}  {gpu.model}  {health}")
