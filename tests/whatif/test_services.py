"""What-if services: ask, run (the Celery task, eagerly), apply through the audited policy services."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied

from accounts.models import AuditEvent
from allocator.book import Policy
from config.errors import PolicyError
from inventory.models import GpuType
from market.models import Guarantee
from market.selectors.policy import market_policy
from market.services.policy import tenant_policy_update
from tests.whatif.conftest import History
from tests.whatif.helpers import proposal
from whatif.models import WhatIfPlot, WhatIfRun, WhatIfState
from whatif.services import WhatIfError, whatif_apply, whatif_execute, whatif_request
from whatif.tasks import whatif_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _eager(settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True


def _ask(history: History, captured: Any, policy: dict[str, Any]) -> WhatIfRun:
    with captured(execute=True):
        run = whatif_request(
            actor=history.world.admin,
            since=history.since,
            until=history.until,
            proposal=policy,
            enqueue=whatif_run.delay,
        )
    return WhatIfRun.objects.get(pk=run.pk)


def test_a_whatif_replays_both_policies_and_keeps_the_plots(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    # A higher H100 reserve prices beta's 8-GPU job (2.5 credits) out: it fits no A100 node.
    run = _ask(history, django_capture_on_commit_callbacks, proposal(types__H100__reserve=3_000_000))
    assert run.state == WhatIfState.DONE and run.progress == 1.0, run.message
    assert run.result is not None
    today, new = run.result["summaries"]["today"], run.result["summaries"]["proposal"]
    assert (today["completed"], today["rejected"]) == (3, 1)  # the pending job bids under the reserve
    assert (new["completed"], new["rejected"]) == (2, 2)
    assert new["per_tenant"]["beta"]["spend"] == 0 < today["per_tenant"]["beta"]["spend"]
    actual = run.result["actual"]  # the jobs as they really ran, submitted 60, 50 and 40 minutes ago
    assert (actual["completed"], actual["preemptions"]) == (3, 0) and actual["spend"] > 0
    assert 2400 <= actual["p50_queue_s"] <= 3000 + 600 and actual["avg_queue_s"] >= 2400
    for figure in ("avg_queue_s", "utilization", "guarantee_compliance", "jain_excess", "preemptions"):
        assert figure in today and figure in new
    plots = dict(WhatIfPlot.objects.filter(run=run).values_list("name", "png"))
    assert set(plots) == {"utilization", "tenants", "prices", "queue_cdf"}
    assert all(bytes(png).startswith(b"\x89PNG") for png in plots.values())
    assert AuditEvent.objects.filter(action="whatif.request", detail__run=run.pk).exists()


def test_repeating_the_task_does_nothing_twice(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    run = _ask(history, django_capture_on_commit_callbacks, proposal())
    finished = run.finished_at
    again = whatif_execute(run_id=run.pk)
    assert again is not None and again.finished_at == finished
    assert WhatIfPlot.objects.filter(run=run).count() == 4


def test_a_failing_replay_is_reported_not_left_running(
    history: History, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulator exploded")

    monkeypatch.setattr("whatif.services.replay", broken)
    run = _ask(history, django_capture_on_commit_callbacks, proposal())
    assert run.state == WhatIfState.FAILED and "simulator exploded" in run.message


def test_an_empty_window_says_so(history: History) -> None:
    from datetime import timedelta

    with pytest.raises(PolicyError, match="no jobs were submitted") as caught:
        whatif_request(
            actor=history.world.admin,
            since=history.since - timedelta(days=3),
            until=history.since - timedelta(days=2),
            proposal=proposal(),
            enqueue=whatif_run.delay,
        )
    assert caught.value.field == "since"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tenants__alpha__weight": 0}, "weight-alpha"),
        ({"tenants__alpha__weight": True}, "weight-alpha"),
        ({"tenants__beta__guarantees": {"H100": 13}}, "guarantees-H100"),  # 4 + 13 > 16 GPUs
        ({"types__H100__max": 1_000_000}, "max-H100"),  # below the reserve
        ({"price_step_bp": 0}, "price_step_bp"),
        ({"min_runtime_s": "600"}, "min_runtime_s"),
        ({"fair_reclaim": "yes"}, "fair_reclaim"),
        ({"tenants__mallory": {"weight": 1, "guarantees": {}}}, "tenants"),
        ({"types__B200": {"reserve": 1, "max": 2}}, "types"),
    ],
)
def test_a_bad_proposal_names_its_field(history: History, change: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        whatif_request(
            actor=history.world.admin,
            since=history.since,
            until=history.until,
            proposal=proposal(**change),
            enqueue=whatif_run.delay,
        )
    assert caught.value.field == field
    assert not WhatIfRun.objects.exists()


def test_only_admins_ask_or_apply(history: History) -> None:
    with pytest.raises(PermissionDenied):
        whatif_request(
            actor=history.world.alice,
            since=history.since,
            until=history.until,
            proposal=proposal(),
            enqueue=whatif_run.delay,
        )
    with pytest.raises(PermissionDenied):
        whatif_apply(actor=history.world.amy, run_id=1)


def test_applying_goes_through_the_audited_policy_services_once(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    w = history.world
    # Moving guarantees between tenants: alpha's is lowered before beta's is raised (16 GPUs, 4 + 4 today).
    policy = proposal(
        price_step_bp=800,
        min_runtime_s=300,
        types__H100__reserve=2_500_000,
        tenants__alpha__guarantees={},
        tenants__beta__guarantees={"H100": 12},
        tenants__gamma__weight=5,
    )
    run = _ask(history, django_capture_on_commit_callbacks, policy)
    before = AuditEvent.objects.count()
    whatif_apply(actor=w.admin, run_id=run.pk)
    assert (market_policy().price_step_bp, market_policy().min_runtime_s) == (800, 300)
    assert GpuType.objects.get(name="H100").reserve_price == 2_500_000
    held = dict(Guarantee.objects.values_list("tenant__slug", "gpus"))
    assert held == {"beta": 12}
    w.gamma.refresh_from_db()
    assert w.gamma.weight == 5
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True)[before:])
    assert actions.count("policy.update") == 1 and actions.count("gpu_type.update") == 1
    assert "tenant_policy.update" in actions and actions[-1] == "whatif.apply"
    run.refresh_from_db()
    assert run.applied_by == w.admin and run.applied_at is not None
    with pytest.raises(WhatIfError, match="applied already"):
        whatif_apply(actor=w.admin, run_id=run.pk)


def test_a_stale_proposal_is_not_applied(history: History, django_capture_on_commit_callbacks: Any) -> None:
    w = history.world
    run = _ask(history, django_capture_on_commit_callbacks, proposal(tenants__gamma__weight=7))
    tenant_policy_update(actor=w.admin, tenant=w.alpha, weight=9)
    with pytest.raises(WhatIfError, match="policy changed since this what-if ran"):
        whatif_apply(actor=w.admin, run_id=run.pk)
    w.gamma.refresh_from_db()
    assert w.gamma.weight == 3


def test_fair_reclaim_is_passed_to_the_simulator_options(history: History) -> None:
    from whatif.policy import market_options

    options = market_options(proposal(fair_reclaim=False))
    assert options.fair_reclaim is False
    assert options.round_policy().fair_reclaim is False


def test_fair_reclaim_switched_off_by_a_proposal_is_applied_and_audited(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    assert market_policy().fair_reclaim == 1
    run = _ask(history, django_capture_on_commit_callbacks, proposal(fair_reclaim=False))
    whatif_apply(actor=history.world.admin, run_id=run.pk)
    assert market_policy().fair_reclaim == 0
    assert AuditEvent.objects.filter(action="policy.update").exists()
    assert AuditEvent.objects.filter(action="whatif.apply").count() == 1


def _queued(history: History) -> WhatIfRun:
    """A run recorded but whose task has not run (its on-commit callback is not executed)."""
    return whatif_request(
        actor=history.world.admin,
        since=history.since,
        until=history.until,
        proposal=proposal(),
        enqueue=whatif_run.delay,
    )


def test_a_run_claimed_by_a_live_worker_is_left_alone_and_a_dead_ones_is_taken_over(history: History) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from whatif.services import task_limit_s

    run = _queued(history)
    WhatIfRun.objects.filter(pk=run.pk).update(state=WhatIfState.RUNNING, started_at=timezone.now())
    ran = whatif_execute(run_id=run.pk)
    assert ran is not None and ran.state == WhatIfState.RUNNING  # another worker is on it
    assert not WhatIfPlot.objects.exists()
    long_ago = timezone.now() - timedelta(seconds=task_limit_s() + 1)
    WhatIfRun.objects.filter(pk=run.pk).update(started_at=long_ago)  # that worker died mid-replay
    ran = whatif_execute(run_id=run.pk)
    assert ran is not None and ran.state == WhatIfState.DONE


def test_a_replay_out_of_time_says_so(history: History, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    from whatif import tasks

    run = _queued(history)

    def slow(**kwargs: Any) -> None:
        WhatIfRun.objects.filter(pk=kwargs["run_id"]).update(state=WhatIfState.RUNNING)
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(tasks, "whatif_execute", slow)
    assert tasks.whatif_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state == WhatIfState.FAILED and "pick a shorter window" in run.message


# ---- fair-share history and checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"fair_share_half_life_s": -1}, "fair_share_half_life_s"),
        ({"fair_share_half_life_s": 31 * 86_400}, "fair_share_half_life_s"),
        ({"fair_share_half_life_s": "1d"}, "fair_share_half_life_s"),
        ({"checkpoint_min": -5}, "checkpoint_min"),
        ({"checkpoint_min": 7 * 24 * 60 + 1}, "checkpoint_min"),
        ({"checkpoint_min": 1.5}, "checkpoint_min"),
    ],
)
def test_a_bad_fair_share_or_checkpoint_knob_names_its_field(
    history: History, change: dict[str, Any], field: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        whatif_request(
            actor=history.world.admin,
            since=history.since,
            until=history.until,
            proposal=proposal(**change),
            enqueue=whatif_run.delay,
        )
    assert caught.value.field == field
    assert not WhatIfRun.objects.exists()


def test_the_half_life_and_checkpoints_reach_the_replay(
    history: History, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import whatif.services as services
    from allocator.sim.scenario import read_scenario
    from whatif.trace import write_trace

    today = proposal()
    assert (today["fair_share_half_life_s"], today["checkpoint_min"]) == (86_400, 0)
    seen: list[Any] = []
    from whatif.replay import replay as real  # what services calls, patched there below

    def spy(today_side: Any, proposal_side: Any, *args: Any, **kwargs: Any) -> Any:
        seen.extend([today_side, proposal_side])
        return real(today_side, proposal_side, *args, **kwargs)

    monkeypatch.setattr(services, "replay", spy)
    run = _ask(
        history, django_capture_on_commit_callbacks, proposal(fair_share_half_life_s=3600, checkpoint_min=30)
    )
    assert run.state == WhatIfState.DONE, run.message
    base, new = seen
    assert base.options.fair_share_half_life_s == 86_400 and base.trace.checkpoint_min == 0
    assert (
        new.options.fair_share_half_life_s == 3600
        and new.options.round_policy().fair_share_half_life_s == 3600
    )
    assert new.options.fair_share_payback_s == market_policy().fair_share_payback_s
    assert new.trace.checkpoint_min == 30
    # The simulator's own reader sees the interval in the written scenario.
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        assert read_scenario(write_trace(new.trace, Path(tmp) / "s.toml")).checkpoint_min == 30
    assert run.result is not None
    summaries = run.result["summaries"]
    for figure in (
        "fair_share_compliance_24h",
        "fair_share_compliance_1h",
        "fair_share_round_compliance",
        "fair_share_shortfall",
        "lost_gpu_hours",
    ):
        assert figure in summaries["today"] and figure in summaries["proposal"]
    assert summaries["proposal"]["checkpoint_min"] == 30


def test_applying_sets_the_half_life_but_never_the_checkpoint_assumption(
    history: History, django_capture_on_commit_callbacks: Any
) -> None:
    run = _ask(
        history, django_capture_on_commit_callbacks, proposal(fair_share_half_life_s=7200, checkpoint_min=15)
    )
    whatif_apply(actor=history.world.admin, run_id=run.pk)
    assert market_policy().fair_share_half_life_s == 7200
    event = AuditEvent.objects.get(action="policy.update")
    assert event.detail == {"fair_share_half_life_s": [86_400, 7200]}


def test_a_run_stored_before_the_knobs_still_replays_and_applies(history: History) -> None:
    from whatif.policy import market_options
    from whatif.services import _stale_fields

    old = proposal()
    for key in ("fair_share_half_life_s", "fair_share_payback_s", "checkpoint_min"):
        old.pop(key)
    options = market_options(old)
    assert (
        options.fair_share_half_life_s == 86_400
        and options.fair_share_payback_s == Policy().fair_share_payback_s
    )
    run = WhatIfRun(baseline=old, proposal=old)
    assert _stale_fields(run, proposal()) == []
