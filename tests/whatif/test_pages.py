"""The console's what-if pages: admins only, form errors for bad or hostile input, the run page, apply."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from accounts.models import AuditEvent
from tests.frontend.conftest import login
from tests.whatif.conftest import History
from whatif.models import WhatIfRun
from whatif.policy import today_policy

pytestmark = pytest.mark.django_db
FORMAT = "%Y-%m-%dT%H:%M"


@pytest.fixture(autouse=True)
def _eager(settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True


def _form(history: History, **changes: str) -> dict[str, str]:
    """The form as the page fills it in (today's policy), over the history's window."""
    from frontend.whatif_form import initial

    data = initial(today_policy())
    data["since"] = history.since.strftime(FORMAT)
    data["until"] = (history.until + timedelta(minutes=2)).strftime(FORMAT)  # the form counts minutes
    data = {k: v for k, v in data.items() if not (k == "fair_reclaim" and v == "")}
    return data | changes


def _done_run(history: History, client: Client, captured: Any, **changes: str) -> WhatIfRun:
    with captured(execute=True):
        response = client.post("/console/whatif/", _form(history, **changes))
    assert response.status_code == 302, response.content.decode()[:2000]
    return WhatIfRun.objects.get()


def _urls(run_id: int) -> list[str]:
    return [
        "/console/whatif/",
        f"/console/whatif/{run_id}/",
        f"/console/whatif/{run_id}/status",
        f"/console/whatif/{run_id}/utilization.png",
    ]


def test_members_owners_and_outsiders_get_403(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    run = _done_run(history, login(Client(), history.world.admin), django_capture_on_commit_callbacks)
    for who in ("amy", "alice", "bob"):
        client = login(Client(), getattr(history.world, who))
        for url in _urls(run.pk):
            assert client.get(url).status_code == 403, (who, url)
        assert client.post("/console/whatif/", _form(history)).status_code == 403
        assert client.post(f"/console/whatif/{run.pk}/apply/").status_code == 403
    assert WhatIfRun.objects.count() == 1
    run.refresh_from_db()
    assert run.applied_at is None


def test_anonymous_is_sent_to_login(history: History) -> None:
    for url in _urls(1):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_an_unknown_run_is_404(history: History) -> None:
    client = login(Client(), history.world.admin)
    for url in [*_urls(999)[1:], "/console/whatif/999/nope.png"]:
        assert client.get(url).status_code == 404, url
    assert client.post("/console/whatif/999/apply/").status_code == 404


def test_the_form_starts_from_todays_policy(history: History) -> None:
    page = login(Client(), history.world.admin).get("/console/whatif/").content.decode()
    assert 'name="weight-beta" value="2"' in page
    assert 'name="guarantee-alpha-H100" value="4"' in page
    assert 'name="reserve-H100" value="2"' in page and 'name="max-H100" value="20"' in page
    assert 'name="fair_share_half_life_s" value="86400"' in page and 'name="checkpoint_min" value="0"' in page


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"since": "last tuesday"}, "since", "must be a date and time"),
        ({"weight-alpha": "<script>alert(1)</script>"}, "weight-alpha", "must be a whole number"),
        ({"weight-alpha": "9" * 5000}, "weight-alpha", "must be a whole number"),
        ({"weight-alpha": "0"}, "weight-alpha", "must be between 1 and"),
        ({"reserve-H100": "-1"}, "reserve-H100", ""),
        ({"reserve-H100": "nan"}, "reserve-H100", ""),
        ({"max-H100": "1"}, "max-H100", "at least the reserve"),
        ({"guarantee-beta-H100": "13"}, "guarantees-H100", "more than the 16"),
        ({"price_step_bp": "1e3"}, "price_step_bp", "must be a whole number"),
        ({"min_runtime_s": "99999999"}, "min_runtime_s", "must be between"),
        ({"until": "2020-01-01T00:00"}, "until", "after the start"),
        ({"fair_share_half_life_s": "-1"}, "fair_share_half_life_s", "must be a whole number"),
        ({"fair_share_half_life_s": "99999999"}, "fair_share_half_life_s", "must be between 0 and"),
        ({"checkpoint_min": "ten"}, "checkpoint_min", "must be a whole number"),
        ({"checkpoint_min": "99999"}, "checkpoint_min", "must be between 0 and"),
    ],
)
def test_bad_or_hostile_input_is_a_form_error(
    history: History, changes: dict[str, str], field: str, message: str
) -> None:
    response = login(Client(), history.world.admin).post("/console/whatif/", _form(history, **changes))
    assert response.status_code == 400
    page = response.content.decode()
    assert "<script>alert" not in page
    assert f"{field}: " in page and message in page, page[:3000]
    assert not WhatIfRun.objects.exists()


def test_an_empty_window_says_so(history: History) -> None:
    data = _form(history, since="2020-01-01T00:00", until="2020-01-02T00:00")
    response = login(Client(), history.world.admin).post("/console/whatif/", data)
    assert response.status_code == 400
    assert "no jobs were submitted in this window" in response.content.decode()


def test_run_page_compares_and_applies(history: History, django_capture_on_commit_callbacks: Any) -> None:
    client = login(Client(), history.world.admin)
    run = _done_run(history, client, django_capture_on_commit_callbacks, **{"weight-gamma": "6"})
    status = client.get(f"/console/whatif/{run.pk}/status").json()
    assert status == {"state": "done", "progress": 1.0, "message": ""}
    page = client.get(f"/console/whatif/{run.pk}/").content.decode()
    assert "gamma weight: 3 → 6" in page
    for figure in ("Average queueing delay", "Utilisation", "Guarantee compliance", "Jain", "Preemptions"):
        assert figure in page
    assert page.count('<img class="plot" src="/console/whatif/') == 4
    png = client.get(f"/console/whatif/{run.pk}/queue_cdf.png")
    assert (
        png.status_code == 200 and png["Content-Type"] == "image/png" and png.content.startswith(b"\x89PNG")
    )
    response = client.post(f"/console/whatif/{run.pk}/apply/", follow=True)
    assert "Proposal applied" in response.content.decode()
    history.world.gamma.refresh_from_db()
    assert history.world.gamma.weight == 6
    assert AuditEvent.objects.filter(action="tenant_policy.update", tenant=history.world.gamma).exists()
    again = client.post(f"/console/whatif/{run.pk}/apply/", follow=True).content.decode()
    assert "applied already" in again
    assert client.get(f"/console/whatif/{run.pk}/apply/").status_code == 405


def test_the_comparison_leads_with_fair_share_and_labels_jain_a_diagnostic(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    client = login(Client(), history.world.admin)
    run = _done_run(
        history,
        client,
        django_capture_on_commit_callbacks,
        **{"fair_share_half_life_s": "3600", "checkpoint_min": "30"},
    )
    assert (run.proposal["fair_share_half_life_s"], run.proposal["checkpoint_min"]) == (3600, 30)
    page = client.get(f"/console/whatif/{run.pk}/").content.decode()
    assert "fair_share_half_life_s: 86400 → 3600" in page and "checkpoint_min: 0 → 30" in page
    for figure in (
        "Fair-share compliance, 24 h windows",
        "Fair-share compliance, 1 h windows",
        "Fair-share compliance, per round",
        "Fair-share shortfall",
        "GPU-hours lost to preemption",
        "Leases moved to make room for gangs",
        "GPU-hours lost to moves",
        "GPU-hours idle on reserved nodes",
        "GPU-hours backfilled on reserved nodes",
        "Jain&#x27;s index of excess per weight (diagnostic)",
    ):
        assert figure in page, figure
    # The simulator's placement figures, with a value from the replay (not a dash).
    assert run.result is not None
    summary = run.result["summaries"]["proposal"]
    for key in ("moves", "moved_lost_gpu_hours", "reserved_idle_gpu_hours", "backfilled_gpu_hours"):
        assert key in summary, key
    assert page.index("Fair-share compliance, 24 h") < page.index("Jain&#x27;s index")
