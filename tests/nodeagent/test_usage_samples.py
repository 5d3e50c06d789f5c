"""Protocol 2's usage block (docs/agent.md §Protocol `POST report`): every cell checked and a refusal naming
it; each report's samples stored once in the packed rows, counters max-wins, the idle spell from the ticks;
protocol 1's reports in the same storage."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from market.models import LeaseUsage, UsageSample
from market.models.usage_blob import unpack
from market.selectors.policy import market_policy
from nodeagent.errors import NodeError
from nodeagent.selectors.nodes import latest_reports
from nodeagent.services.usage import report_ingest
from nodeagent.services.usage_parse import LeaseCounters, parse_leases, parse_samples
from tests.nodeagent.agents import counters

T0 = 1_764_388_800.0


def _usage(gpus: list[str], lease: int, ticks: int = 3, util: list[float] | None = None) -> dict[str, Any]:
    """A usage block: the lease on the first two GPUs, the others free; util per tick for the lease's GPUs."""
    util = util or [95.0] * ticks
    return {
        "gpus": gpus,
        "t": [T0 + 10 * k for k in range(ticks)],
        "util": [[util[k], util[k]] + [0] * (len(gpus) - 2) for k in range(ticks)],
        "mem_mb": [[30211, 30300] + [0] * (len(gpus) - 2) for _ in range(ticks)],
        "power_w": [[301.5, 299.0] + [60.0] * (len(gpus) - 2) for _ in range(ticks)],
        "energy_j": [
            [81234.5 + 3000 * k, 1000.0 + 2990 * k] + [5.0 * k] * (len(gpus) - 2) for k in range(ticks)
        ],
        "lease": [[lease, lease] + [0] * (len(gpus) - 2) for _ in range(ticks)],
        "foreign": [[0] * len(gpus) for _ in range(ticks)],
        "processes": [{"gpu": gpus[0], "pid": 4242, "used_mb": 30000, "lease": lease}],
    }


def test_a_good_block_parses_to_its_columns():
    s = parse_samples(_usage(["GPU-a", "GPU-b", "GPU-c"], 41))
    assert s.gpus == ("GPU-a", "GPU-b", "GPU-c") and s.ticks == 3
    assert s.util.shape == (3, 3) and s.lease[2].tolist() == [41, 41, 0]
    assert s.power_w[0, 0] == 301.5 and s.processes[0]["pid"] == 4242


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda u: u["util"][1].__setitem__(0, 101), "usage.util[1][0]"),
        (lambda u: u["util"][2].__setitem__(1, math.nan), "usage.util[2][1]"),
        (lambda u: u["energy_j"][0].__setitem__(2, math.inf), "usage.energy_j[0][2]"),
        (lambda u: u["mem_mb"][1].__setitem__(1, -1), "usage.mem_mb[1][1]"),
        (lambda u: u["power_w"][0].__setitem__(0, 7000), "usage.power_w[0][0]"),
        (lambda u: u["util"][0].__setitem__(2, True), "usage.util[0][2]"),
        (lambda u: u["mem_mb"][2].__setitem__(0, "30211"), "usage.mem_mb[2][0]"),
        (lambda u: u["lease"][1].__setitem__(0, 41.5), "usage.lease[1][0]"),
        (lambda u: u["foreign"][0].__setitem__(1, 256), "usage.foreign[0][1]"),
        (lambda u: u["util"][1].pop(), "usage.util[1]"),
        (lambda u: u["util"].pop(), "usage.util"),
        (lambda u: u.pop("power_w"), "usage.power_w"),
        (lambda u: u["t"].__setitem__(2, T0), "usage.t[2]"),
        (lambda u: u["t"].__setitem__(0, T0 * 1000), "usage.t[0]"),
        (lambda u: u["gpus"].__setitem__(1, "GPU-a"), "usage.gpus"),
        (lambda u: u["gpus"].append("GPU-d"), "usage.util[0]"),
        (lambda u: u["processes"][0].update(gpu="GPU-z"), "usage.processes[0].gpu"),
        (lambda u: u["processes"][0].update(pid=-1), "usage.processes[0].pid"),
    ],
)
def test_a_bad_cell_is_refused_by_name(mutate, field):
    usage = _usage(["GPU-a", "GPU-b", "GPU-c"], 41)
    mutate(usage)
    with pytest.raises(NodeError) as refused:
        parse_samples(usage)
    assert refused.value.field == field, (refused.value.field, str(refused.value))


def test_the_path_prefixes_every_field():
    usage = _usage(["GPU-a", "GPU-b"], 41)
    usage["util"][0][0] = -3
    with pytest.raises(NodeError) as refused:
        parse_samples(usage, path="body.usage")
    assert refused.value.field == "body.usage.util[0][0]"
    with pytest.raises(NodeError) as refused:
        parse_leases([{"lease": 1, "gpu_seconds": -1}])
    assert (refused.value.field or "").startswith("leases[0]")


def _counters(lease: Any, gpu_seconds: float, samples: int) -> list[LeaseCounters]:
    c = counters(lease, gpu_seconds, samples=samples)
    c.pop("_gpus")
    return parse_leases([c])


def _ingest(
    agent: Any, seq: int, usage: dict[str, Any] | None, leases: list[LeaseCounters], **kw: Any
) -> bool:
    now = datetime.fromtimestamp(T0, UTC) + timedelta(minutes=5)
    return report_ingest(
        node_id=agent.node.pk, boot_epoch=1, seq=seq, sent_at=now, now=kw.pop("now", now),
        samples=None if usage is None else parse_samples(usage), leases=leases,
    )  # fmt: skip


def _uuids(agent: Any) -> list[str]:
    return [g.uuid for g in agent.node.gpus.order_by("index")]


@pytest.mark.django_db
def test_a_report_is_stored_once_and_its_counters_max_win(running):
    _, agent, _, lease = running
    usage = _usage(_uuids(agent), lease.pk)
    assert _ingest(agent, 1, copy.deepcopy(usage), _counters(lease, 60.0, 6))
    assert not _ingest(agent, 1, copy.deepcopy(usage), _counters(lease, 60.0, 6))  # a repeat
    other = copy.deepcopy(usage)
    other["t"] = [t + 1 for t in other["t"]]  # the same seq again with other ticks: still the same report
    assert not _ingest(agent, 1, other, _counters(lease, 60.0, 6))
    assert _ingest(agent, 3, None, _counters(lease, 90.0, 9))  # no samples: a row without ticks
    later = copy.deepcopy(usage) | {"t": [T0 + 30, T0 + 40, T0 + 50]}
    assert _ingest(agent, 2, later, _counters(lease, 30.0, 3))  # late, and new
    rows = list(UsageSample.objects.order_by("seq").values_list("seq", "ticks"))
    assert rows == [(1, 3), (2, 3), (3, 0)]
    stored = unpack(UsageSample.objects.get(seq=1).data)
    assert stored.t_ms.tolist() == [0, 10_000, 20_000] and stored.power_w[0, :2].tolist() == [301.5, 299.0]
    assert stored.energy_j[2, 0] == pytest.approx(87234.5, abs=0.5) and stored.lease[0, :3].tolist() == [
        lease.pk
    ] * 2 + [0]
    usage_row = LeaseUsage.objects.get(lease=lease)
    assert (usage_row.gpu_seconds, usage_row.samples) == (90.0, 9)  # the late seq 2 did not lower them


@pytest.mark.django_db
def test_samples_far_from_the_servers_clock_are_not_stored_but_counted(running):
    _, agent, _, lease = running
    late = datetime.fromtimestamp(T0, UTC) + timedelta(days=5)
    assert _ingest(agent, 1, _usage(_uuids(agent), lease.pk), _counters(lease, 60.0, 6), now=late)
    assert list(UsageSample.objects.values_list("ticks", flat=True)) == [0]
    assert LeaseUsage.objects.get(lease=lease).gpu_seconds == 60.0


@pytest.mark.django_db
def test_the_idle_spell_starts_at_the_first_idle_tick_of_the_reports_tail(running):
    _, agent, _, lease = running
    policy = market_policy()
    policy.idle_util_pct = 10
    policy.save()
    uuids = _uuids(agent)
    _ingest(agent, 1, _usage(uuids, lease.pk, util=[2, 3, 1]), _counters(lease, 30.0, 3))
    first = LeaseUsage.objects.get(lease=lease).idle_since
    assert first == datetime.fromtimestamp(T0, UTC)
    _ingest(
        agent,
        2,
        _usage(uuids, lease.pk, util=[2, 3, 1]) | {"t": [T0 + 30, T0 + 40, T0 + 50]},
        _counters(lease, 60.0, 6),
    )
    assert LeaseUsage.objects.get(lease=lease).idle_since == first  # the spell goes on
    _ingest(agent, 3, None, _counters(lease, 70.0, 7))
    assert LeaseUsage.objects.get(lease=lease).idle_since == first  # no samples: nothing known of the spell
    # Busy at its first tick, idle at the next two: the spell starts again at the second.
    _ingest(
        agent,
        4,
        _usage(uuids, lease.pk, util=[50, 3, 1]) | {"t": [T0 + 60, T0 + 70, T0 + 80]},
        _counters(lease, 100.0, 10),
    )
    assert LeaseUsage.objects.get(lease=lease).idle_since == datetime.fromtimestamp(T0 + 70, UTC)
    _ingest(
        agent,
        5,
        _usage(uuids, lease.pk, util=[3, 3, 90]) | {"t": [T0 + 90, T0 + 100, T0 + 110]},
        _counters(lease, 130.0, 13),
    )
    assert LeaseUsage.objects.get(lease=lease).idle_since is None


@pytest.mark.django_db
def test_protocol_1_and_2_reports_share_the_storage_and_the_node_page_reads_the_newest(running):
    _, agent, _, lease = running
    assert agent.post("usage", agent.report([counters(lease, 10.0)], util=42.0)).status_code == 200
    newest = latest_reports(node_ids=[agent.node.pk])[agent.node.pk]
    assert {s["util_pct"] for s in newest.gpus.values()} == {42.0, 0.0}
    usage = _usage(_uuids(agent), lease.pk, util=[95, 96, 97])
    now = timezone.now()
    usage["t"] = [now.timestamp() + k for k in range(3)]
    assert report_ingest(
        node_id=agent.node.pk, boot_epoch=2, seq=1, sent_at=now, samples=parse_samples(usage),
        leases=_counters(lease, 20.0, 2),
    )  # fmt: skip
    newest = latest_reports(node_ids=[agent.node.pk])[agent.node.pk]
    assert (
        newest.gpus[_uuids(agent)[0]]["util_pct"] == 97.0
        and newest.gpus[_uuids(agent)[0]]["mem_used_mb"] == 30211
    )
    assert UsageSample.objects.count() == 2


@pytest.mark.django_db
def test_protocol_1_rows_stored_before_the_upgrade_are_still_read(running):
    """UsageReport is kept readable for one release: the node page and the job's chart read it beside the
    new rows."""
    from market.models import UsageReport
    from market.selectors.usage import lease_usage_series

    _, agent, _, lease = running
    mine = {g.gpu.uuid for g in lease.lease_gpus.select_related("gpu")}
    start = lease.running_at or lease.started_at
    for k in (1, 2):
        at = start + timedelta(seconds=10 * k)
        samples = [
            {"uuid": u, "at": at.isoformat(), "util_pct": 50.0, "mem_used_mb": 1000.0, "energy_j": 1000.0 * k}
            for u in sorted(mine)
        ]
        UsageReport.objects.create(
            node=agent.node, boot_epoch=1, seq=k, sent_at=at, received_at=at, samples=samples
        )
    newest = latest_reports(node_ids=[agent.node.pk])[agent.node.pk]
    assert newest.sent_at == start + timedelta(seconds=20) and set(newest.gpus) == mine
    usage = _usage(sorted(mine) + [g.uuid for g in agent.node.gpus.exclude(uuid__in=mine)], lease.pk)
    usage["t"] = [(start + timedelta(seconds=30 + 10 * k)).timestamp() for k in range(3)]
    report_ingest(
        node_id=agent.node.pk,
        boot_epoch=2,
        seq=1,
        sent_at=timezone.now(),
        samples=parse_samples(usage),
        leases=[],
    )
    points = lease_usage_series(lease=lease)[agent.node.name]
    assert [p.at for p in points] == [start + timedelta(seconds=10 * k) for k in (1, 2, 3, 4, 5)]
    assert [p.mem_used_mb for p in points] == [2000.0, 2000.0, 60511.0, 60511.0, 60511.0]
    # The newest row wins on the node page once there is one.
    assert latest_reports(node_ids=[agent.node.pk])[agent.node.pk].sent_at == start + timedelta(seconds=50)


def test_the_packed_form_keeps_extreme_cells():
    """Whatever a cell may hold comes back (to the stored unit): a counter reset from 1e12 J to 0, memory
    from 0 to 2^32 - 1 MB, 6,553.5 W, a lease id of 2^53."""
    import numpy as np

    from market.models.usage_blob import pack

    usage = _usage(["GPU-a", "GPU-b"], 2**53)
    usage["energy_j"] = [[1e12, 5.0], [0.0, 1e15], [7.0, 0.0]]
    usage["mem_mb"] = [[0, 2**32 - 1], [2**32 - 1, 0], [12, 12]]
    usage["power_w"][1][0] = 6553.5
    s = parse_samples(usage)
    t = unpack(pack(t_ms=np.array([0, 10_000, 20_000]), util=s.util, mem_mb=s.mem_mb, power_w=s.power_w,
                    energy_j=s.energy_j, lease=s.lease, foreign=s.foreign))  # fmt: skip
    assert t.energy_j.tolist() == [[1e12, 5.0], [0.0, 1e15], [7.0, 0.0]]
    assert t.mem_mb.tolist() == [[0, 2**32 - 1], [2**32 - 1, 0], [12, 12]]
    assert t.power_w[1, 0] == 6553.5 and t.lease[0, 0] == 2**53
