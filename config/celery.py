"""The Celery app. Its settings (reliability ones included) live in config/settings.py under CELERY_*."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Every task runs in the database-conflict net (config/dbretry.py).
app = Celery("gpumarket", task_cls="config.dbretry:RetryingTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
