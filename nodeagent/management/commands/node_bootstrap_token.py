"""Create a one-time bootstrap token for a new node; the secret is printed (or written) once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.models import GpuType
from nodeagent.errors import NodeError
from nodeagent.management.commands._admin import acting_admin
from nodeagent.services.registration import bootstrap_token_create


class Command(BaseCommand):
    help = "Create a one-time bootstrap token for a node's agent (gpumarket-agent --bootstrap-token)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="", help="the node's name (default: the agent's)")
        parser.add_argument("--gpu-type", default="", help="its GPU type (default: from the GPUs' model)")
        parser.add_argument("--domain", default="", help="its topology domain (default: 'default')")
        parser.add_argument("--ttl-hours", type=int, default=24, help="hours the token stays valid (1-720)")
        parser.add_argument("--as", dest="actor", default=None, help="the platform admin acting (audited)")
        parser.add_argument(
            "--write", type=Path, help="write the secret to this file (mode 0600), not stdout"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        gpu_type = None
        if opts["gpu_type"]:
            gpu_type = GpuType.objects.filter(name=opts["gpu_type"]).first()
            if gpu_type is None:
                known = ", ".join(GpuType.objects.order_by("name").values_list("name", flat=True))
                raise CommandError(
                    f"--gpu-type: unknown GPU type {opts['gpu_type']!r}; known: {known or 'none'}"
                )
        if not 1 <= opts["ttl_hours"] <= 720:
            raise CommandError("--ttl-hours: must be between 1 and 720")
        try:
            issued = bootstrap_token_create(
                actor=acting_admin(opts["actor"]),
                name=opts["name"],
                gpu_type=gpu_type,
                topology_domain=opts["domain"],
                ttl=timedelta(hours=opts["ttl_hours"]),
            )
        except NodeError as exc:
            raise CommandError(f"--{exc.field or 'name'}: {exc.message}") from exc
        if opts["write"]:
            path: Path = opts["write"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(issued.secret + "\n")
            path.chmod(0o600)
            self.stdout.write(f"bootstrap token {issued.token.prefix}… written to {path}")
        else:
            self.stdout.write(issued.secret)
