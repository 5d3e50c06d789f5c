"""The job page of a gang on two nodes: each part's node, state, what happened and its log (chromium)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import login, shot
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import counters, leased, register

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _final(lease: Any, gpu_seconds: float, tail: str) -> dict[str, Any]:
    body = counters(lease, gpu_seconds, log_tail=tail)
    body.pop("lease"), body.pop("_gpus")
    return body


def test_the_owner_sees_each_part_of_a_failed_gang_and_which_one_failed(
    world: Any, live_server: Any, page: Any, tmp_path: Path
) -> None:
    world.fund(world.alpha, 1000)
    a = register(world, "gpu-a", address="10.0.0.2")
    b = register(world, "gpu-b", address="10.0.0.3")
    job = make_job(world.alpha, world.alice, gpus=16, limits={world.h100: 5}, name="llama-ft")
    lease = leased(job)
    from market.models import Command

    for agent in (a, b):  # (the commands poll is an async view: the browser's event loop refuses it here)
        for bind in Command.objects.filter(lease=lease, node=agent.node):
            agent.post(f"commands/{bind.pk}/ack", {"result": "applied", "detail": "started"})
        agent.post(f"leases/{lease.pk}/started", {})
    b.post(
        f"leases/{lease.pk}/exited",
        {
            "exit_code": 3,
            "usage": _final(lease, 960.0, "rank 1: loading shard 7\nOSError: shard 7 missing\n"),
        },
    )
    a.post(
        f"leases/{lease.pk}/exited",
        {
            "exit_code": None,
            "signal": 15,
            "stopped_by": "release",
            "usage": _final(lease, 980.0, "rank 0: waiting for rank 1\nSIGTERM: saving checkpoint\n"),
        },
    )
    login(page, live_server.url, "alice")
    page.goto(f"{live_server.url}/t/alpha/jobs/{job.pk}/")
    assert page.locator("[data-field=state]").inner_text() == "Failed"
    ended = page.locator(f"[data-field=ended-{lease.pk}]").inner_text()
    assert ended.startswith("Failed: part 1 on node gpu-b exited with code 3 after")
    assert "the gang's other parts were stopped" in ended
    rows = page.locator(f"[data-field=parts-{lease.pk}] tbody tr")
    assert rows.count() == 2
    assert "gpu-a" in rows.nth(0).inner_text() and "was killed by signal 15" in rows.nth(0).inner_text()
    assert "part 1 on node gpu-b exited with code 3" in rows.nth(1).inner_text()
    page.click("summary:has-text('Log of part 1 on gpu-b')")
    assert "OSError: shard 7 missing" in page.locator("details[open] pre.log").inner_text()
    shot(page, tmp_path, "job-gang-failed", docs=True)
