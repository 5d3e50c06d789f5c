"""A what-if replay: a window of history, today's policy and a proposal, and what the simulator made of both."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class WhatIfState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class WhatIfRun(models.Model):
    """`baseline` and `proposal` are policies as whatif.policy writes them (JSON); `result` holds the
    simulator's summary of each (allocator.sim.metrics.summarize) and what the export approximated."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    since = models.DateTimeField()
    until = models.DateTimeField()
    baseline = models.JSONField()
    proposal = models.JSONField()
    state = models.CharField(max_length=16, choices=WhatIfState.choices, default=WhatIfState.QUEUED)
    progress = models.FloatField(default=0.0, help_text="Share of the replay done, 0 to 1.")
    message = models.CharField(max_length=500, blank=True)
    result = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.state})"


class WhatIfPlot(models.Model):
    """One of the simulator's plots (allocator.sim.plots) of a run, as PNG bytes: the worker that drew it
    and the web process that serves it need not share a disk."""

    run = models.ForeignKey(WhatIfRun, on_delete=models.CASCADE, related_name="plots")
    name = models.CharField(max_length=32)
    png = models.BinaryField()

    class Meta:
        ordering = ["run", "name"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="whatif_plot_unique")]
