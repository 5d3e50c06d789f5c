"""The outbox: commands for node agents, written in the same transaction as the decision behind them."""

from __future__ import annotations

from django.db import models


class CommandKind(models.TextChoices):
    BIND = "bind", "Bind"  # start the job on the lease's GPUs
    PREEMPT = "preempt", "Preempt"  # SIGTERM, grace period, SIGKILL; the job returns to pending
    RELEASE = "release", "Release"  # the same signals, for a cancelled or expired job


class CommandState(models.TextChoices):
    PENDING = "pending", "Pending"
    ACKED = "acked", "Acknowledged"


class Command(models.Model):
    """One command for one node. `fence` rises with every round, so an agent can refuse a command older
    than one it has already applied; the id orders a node's commands (a preempt comes before the bind that
    reuses its GPUs)."""

    # No database constraints, as for leases (the comment above Lease says why).
    # No single-column indexes either: command_node_state and command_lease_node_kind lead with them.
    node = models.ForeignKey(
        "inventory.Node",
        on_delete=models.PROTECT,
        related_name="commands",
        db_constraint=False,
        db_index=False,
    )
    lease = models.ForeignKey(
        "market.Lease",
        on_delete=models.PROTECT,
        related_name="commands",
        db_constraint=False,
        db_index=False,
    )
    kind = models.CharField(max_length=16, choices=CommandKind.choices)
    payload = models.JSONField()
    fence = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=CommandState.choices, default=CommandState.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    acked_at = models.DateTimeField(null=True, blank=True)
    # The agent's answer (db_default: the round commit inserts commands in bulk, naming its columns): "applied" or "refused" (a stale fence or a passed expiry), and why.
    result = models.CharField(max_length=16, blank=True, db_default="")
    result_detail = models.CharField(max_length=500, blank=True, db_default="")

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["node", "state"], name="command_node_state")]
        constraints = [
            models.UniqueConstraint(fields=["lease", "node", "kind"], name="command_lease_node_kind")
        ]

    def __str__(self) -> str:
        return f"{self.kind} lease {self.lease_id} on {self.node_id}"
