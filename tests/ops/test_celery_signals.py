"""A request's id travels with the tasks it sends; a task's lines carry its ids; its outcome is counted."""

from __future__ import annotations

from types import SimpleNamespace

from config import metrics
from config.logs import bind, current_ids
from ops import celery_signals


def test_request_id_goes_into_the_message_headers_and_back_out_in_the_worker() -> None:
    headers: dict[str, object] = {}
    with bind(request_id="req-7"):
        celery_signals._send_request_id(headers=headers)
    assert headers == {"gpumarket_request_id": "req-7"}

    task = SimpleNamespace(name="market.round_tick", request=SimpleNamespace(gpumarket_request_id="req-7"))
    before = metrics.CELERY_TASKS.labels("market.round_tick", "success")._value.get()
    celery_signals._bind_ids(task_id="t-1", task=task)
    assert current_ids() == {"task_id": "t-1", "request_id": "req-7"}
    celery_signals._count(task_id="t-1", task=task, state="SUCCESS")
    assert current_ids() == {}
    assert metrics.CELERY_TASKS.labels("market.round_tick", "success")._value.get() == before + 1


def test_no_request_no_header() -> None:
    headers: dict[str, object] = {}
    celery_signals._send_request_id(headers=headers)
    assert headers == {}
