"""The Celery app. Its settings (reliability ones included) live in config/settings.py under CELERY_*."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gpumarket")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _warm_allocator(**_: object) -> None:
    """Compile the allocator's kernels once when the worker starts, not in the first round it clears (a
    prefork pool's children inherit them)."""
    from allocator import warm_up

    warm_up()
