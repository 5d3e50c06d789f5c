"""Celery tasks of the node side: thin doors to nodeagent services."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from nodeagent.services.heartbeat import nodes_mark_down
from nodeagent.services.lease_events import leases_release_idle


@shared_task(name="nodeagent.nodes_check")
def nodes_check() -> dict[str, list[int]]:
    """Beat's entry: nodes silent past NODE_DOWN_SECONDS go down (their leases settled, jobs requeued), and
    the idle policy releases leases that stayed idle too long."""
    return {
        "down": nodes_mark_down(timeout_s=settings.NODE_DOWN_SECONDS),
        "idle": leases_release_idle(),
    }
