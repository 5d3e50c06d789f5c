"""Worker heartbeats: each Celery worker that runs the heartbeat task leaves the time here."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time a worker ran `ops.worker_heartbeat`. Beat sends that task every
    WORKER_HEARTBEAT_SECONDS with an expiry, so a fresh row proves beat, the broker and a worker all work."""

    hostname = models.CharField(max_length=200, unique=True)
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-seen_at"]

    def __str__(self) -> str:
        return f"{self.hostname} at {self.seen_at:%H:%M:%S}"
