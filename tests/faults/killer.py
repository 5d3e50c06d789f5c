"""Run a Celery worker that SIGKILLs itself at one point of a round (tests/faults/test_worker_kill.py).

    python -m tests.faults.killer AFTER_FROZEN|AFTER_CLEARED|MID_COMMIT celery-args...

AFTER_FROZEN: dies as the clear step starts, the freeze committed. AFTER_CLEARED: dies as the commit step
starts, the clear committed. MID_COMMIT: dies after the commit has written its rows, before its transaction
commits. The kill is the process's own SIGKILL: no handler, no cleanup, as when the kernel's OOM killer or a
node loss takes a worker.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _die(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    import django

    django.setup()
    from market.models import RoundState
    from market.services import rounds

    if point == "AFTER_FROZEN":
        rounds._STEPS[RoundState.FROZEN] = _die
    elif point == "AFTER_CLEARED":
        rounds._STEPS[RoundState.CLEARED] = _die
    elif point == "MID_COMMIT":
        from market.services.round_commit import commit_result as real

        def commit_then_die(**kwargs: Any) -> Any:
            real(**kwargs)
            _die()

        vars(rounds)["commit_result"] = (
            commit_then_die  # the name rounds calls (imported there, not exported)
        )
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    arm(sys.argv[1])
    from config.celery import app

    app.worker_main(["worker", *sys.argv[2:]])
