"""Celery tasks of the ops app: thin doors to its services."""

from __future__ import annotations

from celery import Task, shared_task

from ops.services import heartbeat_record


@shared_task(name="ops.worker_heartbeat", bind=True)
def worker_heartbeat(self: Task[[], None]) -> None:  # bound: self is the task
    """Leave this worker's heartbeat (beat sends it every WORKER_HEARTBEAT_SECONDS, with an expiry)."""
    heartbeat_record(hostname=self.request.hostname or "unknown")
