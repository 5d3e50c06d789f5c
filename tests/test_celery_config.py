from __future__ import annotations

from django.conf import settings

from config.celery import app


def test_reliability_settings_of_the_architecture() -> None:
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert 0 < conf.task_soft_time_limit < conf.task_time_limit
    # Redis re-delivers unacknowledged tasks after the visibility timeout: it must outlast the longest task.
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit


def test_tests_use_redis_as_broker() -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://")
