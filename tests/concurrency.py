"""Real threads for the PostgreSQL concurrency tests, each with its own connection and transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

THREADS = 16


def run_together(work: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    """Run work(i) in n threads released at once; returns each result or the exception it raised."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - reported to the test through results
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return results
