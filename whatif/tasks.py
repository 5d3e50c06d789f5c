"""Celery task: a thin door to whatif.services.whatif_execute."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from whatif.services import task_limit_s, whatif_execute, whatif_fail

log = logging.getLogger(__name__)


@shared_task(name="whatif.run", time_limit=task_limit_s(), soft_time_limit=task_limit_s() - 10)
def whatif_run(run_id: int) -> str | None:
    """Replay one what-if; a repeated delivery finds the run claimed or finished and does nothing."""
    try:
        run = whatif_execute(run_id=run_id)
    except SoftTimeLimitExceeded:
        whatif_fail(
            run_id=run_id, message=f"The replay took longer than {task_limit_s()} s: pick a shorter window."
        )
        return "failed"
    except Exception as exc:  # the page must show why, not spin forever; the traceback goes to the log
        log.exception("what-if %s failed", run_id)
        whatif_fail(run_id=run_id, message=f"The replay failed: {type(exc).__name__}: {exc}")
        return "failed"
    return run.state if run is not None else None
