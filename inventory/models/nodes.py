"""GPU machines and their GPUs (docs/agent.md): what the rounds place leases on and the agents report on."""

from __future__ import annotations

from django.db import models

# A node's capabilities["sandbox"] when its agent tried and the kernel refused (nodeagent.agent.__main__).
UNCONFINED_PREFIX = "unavailable"


class Node(models.Model):
    """A GPU machine. `state` is what rounds read: only an UP node takes new work. DOWN is set by the
    heartbeat timeout and cleared by the next heartbeat; DRAINING and RETIRED are an admin's, and
    `drained_at`/`retired_at` keep that intent across a DOWN spell."""

    class State(models.TextChoices):
        UP = "up", "Up"
        DOWN = "down", "Down"
        DRAINING = "draining", "Draining"
        RETIRED = "retired", "Retired"

    name = models.CharField(max_length=128, unique=True)
    gpu_type = models.ForeignKey("inventory.GpuType", on_delete=models.PROTECT, related_name="nodes")
    topology_domain = models.CharField(max_length=64, default="default")
    state = models.CharField(max_length=16, choices=State.choices, default=State.UP)
    created_at = models.DateTimeField(auto_now_add=True)
    # SHA-256 of the node credential (gpn_...); empty for nodes made without an agent (tests, old demos).
    credential_digest = models.CharField(max_length=64, blank=True, db_index=True)
    agent_version = models.CharField(max_length=64, blank=True)
    boot_epoch = models.PositiveIntegerField(default=0)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    down_since = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    # What the agent enforces on a job, as it said at its last registration (docs/agent.md §The sandbox):
    # {"sandbox": "enforced" | why not, "limits": {"memory": "enforced" | why not, ...}, ...}. {} before.
    capabilities = models.JSONField(default=dict, blank=True)
    # Its agent tried the sandbox and the kernel refused it: only trusted tenants' jobs go there (kept apart
    # from capabilities as a column the round's book reads cheaply).
    unconfined = models.BooleanField(default=False)
    # Where the other nodes of a gang reach this one (inventory.addresses checks it): the agent's registration
    # sets it, unless an admin set it (`address_pinned`), which then stands until the admin clears it.
    # db_default: nodes made before it have none.
    address = models.CharField(max_length=253, blank=True, default="", db_default="")
    address_pinned = models.BooleanField(default=False, db_default=False)

    class Meta:
        # The agent server's table from before the inventory carve-out (issue 26): data stays where it is.
        db_table = "nodeagent_node"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def sandboxed(self) -> bool:
        """Whether its agent runs each job in the sandbox; a node that does not takes only trusted tenants'."""
        return bool(self.capabilities.get("sandbox") == "enforced")


class Gpu(models.Model):
    """One GPU. A GPU reported unhealthy, or missing from a re-registration (`absent`), takes no new work."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    model = models.CharField(max_length=128, blank=True)
    memory_mb = models.PositiveIntegerField(default=0)
    healthy = models.BooleanField(default=True)
    error = models.CharField(max_length=500, blank=True)
    absent = models.BooleanField(default=False)

    class Meta:
        db_table = "nodeagent_gpu"
        ordering = ["node", "index"]
        constraints = [
            # A replaced GPU keeps its row (leases point at it) but gives its index to the new one.
            models.UniqueConstraint(
                fields=["node", "index"], condition=models.Q(absent=False), name="gpu_node_index_unique"
            )
        ]
