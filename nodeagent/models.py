"""GPU machines and their GPUs, as the node agents report them."""

from __future__ import annotations

from django.db import models


class Node(models.Model):
    class State(models.TextChoices):
        UP = "up", "Up"
        DOWN = "down", "Down"
        DRAINING = "draining", "Draining"

    name = models.CharField(max_length=128, unique=True)
    gpu_type = models.ForeignKey("market.GpuType", on_delete=models.PROTECT, related_name="nodes")
    topology_domain = models.CharField(max_length=64, default="default")
    state = models.CharField(max_length=16, choices=State.choices, default=State.UP)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    model = models.CharField(max_length=128, blank=True)
    memory_mb = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_node_index_unique")]
