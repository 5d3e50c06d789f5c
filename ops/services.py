"""Writes of the ops app: worker heartbeats."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from ops.models import WorkerHeartbeat


def heartbeat_record(*, hostname: str, now: datetime | None = None) -> None:
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname[:200], defaults={"seen_at": now or timezone.now()}
    )
