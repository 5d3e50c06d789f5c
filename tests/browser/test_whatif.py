"""An admin replays the demo's own history in the console (a real Celery worker runs the replay while the
page polls its progress), compares today's policy with a proposal and applies it with one click.

The history is the demo's: `demo_data` with its nodes registered through the agent API, its jobs cleared by
rounds and run as the demo agents run them (started, measured for the demo job's 120 s, exited)."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _demo_history(var_dir: Path) -> int:
    """The demo platform after its agents ran every demo job that a round gave GPUs; returns how many ran."""
    from django.core.cache import cache
    from django.core.management import call_command
    from django.utils import timezone
    from rest_framework.test import APIClient

    from frontend.management.commands.demo_data import DEMO_JOB_SECONDS, NODES
    from market.models import EndReason, Lease, LeaseState, Round
    from market.services.leases import lease_running, lease_stopped
    from market.services.rounds import round_advance
    from tests.frontend.conftest import report_usage

    call_command("demo_data", stdout=StringIO())
    for name, _type, _domain, gpus in NODES:  # what each demo agent does with its bootstrap token
        api = APIClient()
        api.credentials(
            HTTP_AUTHORIZATION=f"Bearer {(var_dir / 'agents' / name / 'bootstrap_token').read_text().strip()}"
        )
        body = {
            "gpus": [
                {"uuid": f"GPU-{name}-{i}", "index": i, "model": "sim", "memory_mb": 1} for i in range(gpus)
            ]
        }
        assert api.post("/api/v1/agent/register", body, format="json").status_code == 201
    cache.clear()
    call_command("demo_data", "-v", "0", stdout=StringIO())  # now the demo jobs fit: they are submitted
    ran = 0
    for minutes in (4, 3, 2, 1):
        rnd = Round.objects.create(slot=timezone.now() - timedelta(minutes=minutes), period_s=30)
        round_advance(round_id=rnd.pk)
        for lease in Lease.objects.filter(state=LeaseState.ALLOCATED):
            lease_running(lease_id=lease.pk)
            report_usage(Lease.objects.get(pk=lease.pk), seconds=DEMO_JOB_SECONDS, every=30)
            lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED)
            ran += 1
    return ran


def test_admin_runs_a_whatif_on_the_demo_history_and_applies_it(
    settings: Any, tmp_path: Path, live_server: Any, page: Any, worker_queue: str
) -> None:
    from config.celery import app
    from frontend.management.commands.demo_data import DEMO_JOBS, DEMO_PASSWORD

    settings.VAR_DIR = tmp_path
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    assert _demo_history(tmp_path) == len(DEMO_JOBS)
    default_queue = app.conf.task_default_queue
    app.conf.task_default_queue = worker_queue  # the task the page asks for goes to this test's worker
    try:
        _whatif_in_the_console(live_server.url, page, tmp_path, DEMO_PASSWORD, len(DEMO_JOBS))
    finally:
        app.conf.task_default_queue = default_queue


def _whatif_in_the_console(url: str, page: Any, tmp_path: Path, password: str, jobs: int) -> None:
    from accounts.models import AuditEvent, Tenant
    from inventory.models import GpuType
    from whatif.models import WhatIfRun

    page.goto(f"{url}/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    page.click("main button[type=submit]")
    page.click("text=Admin console")
    page.click("nav.subnav >> text=What-if")
    # The form starts from today's policy over the last week, which holds the whole demo history.
    assert page.locator("#id_weight-speech").input_value() == "1"
    page.fill("#id_reserve-H100", "4.5")  # above vit-large's 4.0 bid: it would not have run
    page.fill("#id_weight-speech", "2")
    page.fill("#id_guarantee-speech-A100", "2")
    shot(page, tmp_path, "whatif-form", docs=True)
    page.click("button:has-text('Run what-if')")
    page.wait_for_selector("#whatif-progress, #whatif-comparison")
    page.wait_for_selector("#whatif-comparison", timeout=120_000)  # the worker replays; the page reloads
    table = page.locator("#whatif-comparison")
    completed = table.locator("tr", has_text="Jobs completed").locator("td")
    cells = [completed.nth(k).inner_text() for k in range(3)]  # what happened, today, proposal
    assert cells == [str(jobs), str(jobs), str(jobs - 1)]
    for figure in ("Average queueing delay", "Utilisation", "Guarantee compliance", "Jain", "Preemptions"):
        assert table.locator("tr", has_text=figure).count() >= 1
    assert page.locator("#whatif-tenants tr", has_text="vision").count() == 1
    assert page.locator("figure.chart-box img").count() == 4
    # Polled from here, not with wait_for_function: when its first look fails, Playwright re-evaluates the
    # expression in the page with eval, which the portal's CSP (script-src 'self') refuses.
    deadline = time.monotonic() + 30
    loaded = "Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)"
    while not page.evaluate(loaded):
        assert time.monotonic() < deadline, "the what-if charts did not load"
        time.sleep(0.1)
    shot(page, tmp_path, "whatif", docs=True)

    page.click("button:has-text('Apply the proposal')")
    page.wait_for_selector("text=Proposal applied")
    assert page.locator("button:has-text('Apply the proposal')").count() == 0
    assert GpuType.objects.get(name="H100").reserve_price == 4_500_000
    assert Tenant.objects.get(slug="speech").weight == 2
    run = WhatIfRun.objects.get()
    assert run.applied_at is not None and run.applied_by is not None and run.applied_by.username == "admin"
    assert AuditEvent.objects.filter(action="whatif.apply", detail__run=run.pk).exists()
    shot(page, tmp_path, "whatif-applied", docs=True)
    page.click("nav.subnav >> text=Audit")
    assert page.locator("table.data tbody tr", has_text="whatif.apply").count() == 1
