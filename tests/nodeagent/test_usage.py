"""Usage ingestion: every report counted once whatever the order, repeats and lateness."""

from __future__ import annotations

import copy

import pytest

from market.models import LeaseState, LeaseUsage, UsageSample
from market.models.usage_blob import unpack
from market.selectors.policy import market_policy
from nodeagent.models import UsageMark
from tests.nodeagent.agents import counters

pytestmark = pytest.mark.django_db


def _usage(lease) -> LeaseUsage:
    return LeaseUsage.objects.get(lease=lease)


def test_duplicated_reports_count_once(running):
    _, agent, _, lease = running
    report = agent.report([counters(lease, 120.0, log_tail="epoch 1\n")])
    for _ in range(3):
        response = agent.post("usage", copy.deepcopy(report))
        assert response.status_code == 200 and response.json() == {"acked": 1}
    assert UsageSample.objects.count() == 1
    usage = _usage(lease)
    assert (usage.gpu_seconds, usage.samples, usage.log_tail) == (120.0, 120, "epoch 1\n")
    stored = UsageSample.objects.get()
    ticks = unpack(stored.data)
    assert stored.ticks == 1 and ticks.util.shape == (1, 8) and set(ticks.lease.ravel()) - {0} == {lease.pk}
    assert stored.columns is not None and len(stored.columns.uuids.split(",")) == 8


def test_reordered_reports_keep_the_newest_counters(running):
    _, agent, _, lease = running
    r1 = agent.report([counters(lease, 100.0, util_avg=50.0, log_tail="one")])
    r2 = agent.report([counters(lease, 200.0, util_avg=70.0, log_tail="one two")])
    r3 = agent.report([counters(lease, 300.0, util_avg=60.0, log_tail="one two three", util_max=80.0)])
    for report in (r3, r1, r2):
        assert agent.post("usage", report).status_code == 200
    usage = _usage(lease)
    assert (usage.gpu_seconds, usage.samples, usage.util_avg, usage.log_tail) == (
        300.0,
        300,
        60.0,
        "one two three",
    )
    assert usage.util_max == 100.0  # the largest ever reported (r1 and r2 said 100)
    assert UsageSample.objects.count() == 3
    assert UsageMark.objects.get(node=agent.node, boot_epoch=1).seq == 3


def test_a_restarted_agent_starts_a_new_epoch(running):
    _, agent, _, lease = running
    agent.post("usage", agent.report([counters(lease, 100.0)]))
    agent.epoch, agent.seq = (
        2,
        0,
    )  # the agent restarted: seq from 1 again, counters still from the job's start
    assert agent.post("usage", agent.report([counters(lease, 150.0)])).json() == {"acked": 1}
    assert UsageSample.objects.count() == 2 and _usage(lease).gpu_seconds == 150.0
    assert dict(UsageMark.objects.values_list("boot_epoch", "seq")) == {1: 1, 2: 1}


def test_one_batch_with_two_reports_for_one_lease(running):
    from nodeagent.services.usage import usage_ingest
    from nodeagent.services.usage_parse import parse_report

    _, agent, _, lease = running
    reports = [agent.report([counters(lease, s)]) for s in (10.0, 30.0, 20.0)]
    usage_ingest(reports=[(agent.node.pk, parse_report(r)) for r in reports + reports])
    assert _usage(lease).gpu_seconds == 30.0 and UsageSample.objects.count() == 3


def test_a_late_report_after_settlement_changes_nothing(running):
    _, agent, _, lease = running
    agent.post("usage", agent.report([counters(lease, 100.0)]))
    final = counters(lease, 110.0)
    final.pop("lease"), final.pop("_gpus")
    assert agent.post(f"leases/{lease.pk}/exited", {"exit_code": 0, "usage": final}).status_code == 200
    lease.refresh_from_db()
    charged = lease.charged
    late = agent.report([counters(lease, 5000.0)])
    assert agent.post("usage", late).status_code == 200
    lease.refresh_from_db()
    assert lease.state == LeaseState.ENDED and lease.charged == charged and _usage(lease).gpu_seconds == 110.0


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda r: r.update(seq=0), "seq"),
        (lambda r: r.update(seq="1"), "seq"),
        (lambda r: r.update(sent_at="yesterday"), "sent_at"),
        (lambda r: r["gpus"][0].update(util_pct=101), "gpus[0].util_pct"),
        (lambda r: r["gpus"][0].update(power_w=-5), "gpus[0].power_w"),
        (
            lambda r: r["gpus"][2]["processes"].append({"pid": 1, "used_mb": 1, "lease": "x"}),
            "gpus[2].processes[0].lease",
        ),
        (lambda r: r["leases"][0].update(gpu_seconds=-1), "leases[0].gpu_seconds"),
        (lambda r: r["leases"][0].update(log_tail=7), "leases[0].log_tail"),
        (lambda r: r.update(leases="all"), "leases"),
    ],
)
def test_a_bad_report_is_400_naming_the_field(running, mutate, field):
    _, agent, _, lease = running
    report = agent.report([counters(lease, 10.0)])
    mutate(report)
    response = agent.api.post("/api/v1/agent/usage", report, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"], response.json()
    assert not UsageSample.objects.exists() and not LeaseUsage.objects.exists()


def test_a_huge_log_tail_keeps_its_newest_64_kib(running):
    _, agent, _, lease = running
    tail = "x" * 70_000 + "THE END"
    agent.post("usage", agent.report([counters(lease, 10.0, log_tail=tail)]))
    stored = _usage(lease).log_tail
    assert len(stored) == 64 * 1024 and stored.endswith("THE END")


def test_idle_spell_is_tracked_only_with_the_policy_on(running):
    _, agent, _, lease = running
    agent.post("usage", agent.report([counters(lease, 10.0)], util=1))
    assert _usage(lease).idle_since is None  # policy off
    policy = market_policy()
    policy.idle_util_pct = 10
    policy.save()
    agent.post("usage", agent.report([counters(lease, 20.0)], util=1))
    first = _usage(lease).idle_since
    assert first is not None
    agent.post("usage", agent.report([counters(lease, 30.0)], util=2))
    assert _usage(lease).idle_since == first  # the spell goes on from its start
    agent.post("usage", agent.report([counters(lease, 40.0)], util=50))
    assert _usage(lease).idle_since is None


def test_reports_are_counted_by_outcome_in_the_metrics(running):
    from config.metrics import USAGE_REPORTS

    def counted(outcome: str) -> float:
        return float(USAGE_REPORTS.labels(outcome)._value.get())

    before = {o: counted(o) for o in ("ingested", "duplicate", "refused")}
    _, agent, _, lease = running
    report = agent.report([counters(lease, 30.0)])
    assert agent.post("usage", copy.deepcopy(report)).status_code == 200
    assert agent.post("usage", copy.deepcopy(report)).status_code == 200  # a resend
    report["seq"] = "x"
    assert agent.api.post("/api/v1/agent/usage", report, format="json").status_code == 400
    assert {o: counted(o) - before[o] for o in before} == {"ingested": 1, "duplicate": 1, "refused": 1}


def test_the_lag_from_sent_to_stored_is_observed_once_per_new_report(running):
    from datetime import UTC, datetime, timedelta

    from config.metrics import USAGE_LAG

    def observed() -> tuple[float, float]:
        values = {s.name.rsplit("_", 1)[1]: s.value for s in list(USAGE_LAG.collect())[0].samples}
        return values["count"], values["sum"]

    count, total = observed()
    _, agent, _, lease = running
    report = agent.report([counters(lease, 30.0)])
    report["sent_at"] = (datetime.now(UTC) - timedelta(seconds=120)).isoformat()  # spooled by the agent
    assert agent.post("usage", copy.deepcopy(report)).status_code == 200
    assert agent.post("usage", copy.deepcopy(report)).status_code == 200  # a resend: not observed again
    now_count, now_total = observed()
    assert now_count == count + 1 and 120 <= now_total - total < 180


def test_an_agent_body_nested_too_deep_is_a_400_not_a_500(running):
    _, agent, _, _ = running
    deep = "[" * 5000 + "]" * 5000
    response = agent.api.post("/api/v1/agent/usage", deep, content_type="application/json")
    assert response.status_code == 400, response.content
    assert not UsageSample.objects.exists()


def test_retention_drops_old_protocol_1_reports_and_keeps_the_lease_summary(running):
    """UsageReport is no longer written (issue 36) but kept readable for one release: retention still prunes
    it; the new samples' days are dropped whole by the storage upkeep (tests/market/test_usage_storage.py)."""
    from datetime import timedelta

    from django.utils import timezone

    from market.models import UsageReport
    from market.services.retention import retention_prune

    _, agent, _, lease = running
    for seq, seconds in ((1, 60.0), (2, 120.0)):
        report = agent.report([counters(lease, seconds)])
        report["seq"] = seq
        assert agent.post("usage", report).status_code == 200
    old = timezone.now() - timedelta(days=400)
    for seq in (1, 2):
        UsageReport.objects.create(
            node=agent.node, boot_epoch=0, seq=seq, sent_at=old, received_at=old if seq == 1 else timezone.now(),
            samples=[],
        )  # fmt: skip
    assert retention_prune().usage_reports == 1
    assert list(UsageReport.objects.values_list("seq", flat=True)) == [2]
    assert UsageSample.objects.count() == 2
    assert _usage(lease).gpu_seconds == 120.0  # what the lease is billed from stays
