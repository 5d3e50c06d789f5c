"""The portal against a real node: chromium, a live server, a real Celery worker and a real `gpumarket-agent`
process (simulated NVML backend) running the job the member submits. The agent, its settings and the job are
the integration tests' own (tests/integration/test_agent_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from config.money import format_fixed
from tests.browser.helpers import login, shot
from tests.browser.test_portal import _round_by_worker
from tests.integration.test_agent_e2e import JOB, cluster, wait_until, worker_env  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECONDS = 12  # the job computes this long: the agent reports every 0.5 s meanwhile


def test_member_submits_a_job_that_a_real_agent_runs_and_sees_its_charge_and_utilisation(
    cluster: dict[str, Any],  # noqa: F811 (the fixture imported above)
    live_server: Any,
    page: Any,
    tmp_path: Path,
) -> None:
    from market.models import Job, Lease, LeaseState, LeaseUsage

    agent = cluster["agent"]("node-a")  # registered with a bootstrap token, 2 simulated H100s
    login(page, live_server.url, "amy")
    page.click("text=Submit")
    page.fill("#id_name", "agent e2e")
    page.fill("#id_command", f"{sys.executable} {JOB} {SECONDS}")
    page.fill("#id_gpus", "2")
    page.fill("#id_max_hours", "1")
    page.select_option("#bids-0-gpu_type", "H100")
    page.fill("#bids-0-limit", "5")
    page.click("form button:has-text('Submit job')")
    page.wait_for_selector("h1:has-text('agent e2e')")
    job = Job.objects.get(name="agent e2e")
    assert page.locator("[data-field=state]").inner_text() == "Pending"

    _round_by_worker(cluster["queue"])
    page.reload()
    assert "Won 2 H100 GPUs in tier" in page.locator("td.reason").first.inner_text()
    lease = wait_until(
        lambda: Lease.objects.filter(job=job, state=LeaseState.RUNNING).first(),
        f"the agent to start the job\n{agent.tail()}",
    )
    wait_until(lambda: LeaseUsage.objects.filter(lease=lease, samples__gte=3).exists(), "usage reports")
    page.reload()
    assert page.locator("[data-field=state]").inner_text() == "Running"
    charts = page.locator(f".usage-charts[data-lease='{lease.pk}'] svg.chart")
    assert charts.count() == 3
    assert charts.first.get_attribute("aria-label") == f"Lease {lease.pk}: GPU utilisation"
    shot(page, tmp_path, "job-agent-running")

    wait_until(
        lambda: Lease.objects.filter(pk=lease.pk, state=LeaseState.ENDED).exists(),
        f"the job to end\n{agent.tail()}",
        timeout=90,
    )
    lease.refresh_from_db()
    page.reload()
    assert page.locator("[data-field=state]").inner_text() == "Completed"
    assert lease.charged and lease.charged > 0
    assert page.locator("[data-field=charged]").first.inner_text() == format_fixed(lease.charged)
    assert (
        page.locator(f"[data-field=ended-{lease.pk}]")
        .inner_text()
        .startswith("Completed: the job exited normally after")
    )
    assert page.locator(f".usage-charts[data-lease='{lease.pk}'] svg.chart polyline").count() == 3
    assert f"lease {lease.pk} done" in page.locator("pre.log").inner_text()
    shot(page, tmp_path, "job-agent-completed", docs=True)
