"""The agent speaking protocol 2 (docs/agent.md §Protocol 2) to a server whose register answer says so: one
gzipped report at the server's interval, events that matter now at once, acknowledgements riding on the
reports, the command poll held for the server's poll_seconds, and a spooled backlog sent in bounded chunks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent import usage
from nodeagent.agent.state import StateDir
from tests.agent.conftest import AgentProcess, _kill_leftover_jobs
from tests.agent.fakeserver import FakeServer, wait_for
from tests.agent.test_jobs import demo


@pytest.fixture
def server2() -> Iterator[FakeServer]:
    # A long interval: anything that comes sooner came because it matters now.
    fake = FakeServer(protocol=2, report_seconds=30.0, poll_seconds=3)
    fake.start()
    yield fake
    if fake._httpd is not None:
        fake.stop()


@pytest.fixture
def agent2(server2: FakeServer, tmp_path: Path) -> Iterator[AgentProcess]:
    handle = AgentProcess(server2, tmp_path)
    yield handle
    if handle.proc is not None and handle.proc.poll() is None:
        handle.kill()
    _kill_leftover_jobs(handle.state_dir)


def _first_report(server: FakeServer) -> list[str]:
    wait_for(lambda: server.reports, what="registration and a first report")
    return server.gpus()


def test_reports_are_gzipped_and_events_that_matter_go_at_once(server2, agent2):
    agent2.start()
    gpus = _first_report(server2)
    first = server2.reports[0]
    assert first["protocol"] == 2 and first["seq"] == 1 and server2.encodings[0] == "gzip"
    # The poll is held for the server's poll_seconds (75-100% of it), on its own thread.
    wait_for(lambda: server2.waits, what="a command poll")
    assert all(2 <= w <= 3 for w in server2.waits)
    # A bind: its acknowledgement and start go at once, not after the 30 s interval.
    bind = server2.bind(1, demo(1.0), gpus=gpus[:1])
    wait_for(lambda: 1 in server2.started and bind in server2.acks, timeout=10, what="the bind's report")
    assert server2.acks[bind]["result"] == "applied"
    # The job exits after about a second: reported at once, with or after its final counters.
    wait_for(lambda: 1 in server2.exited, timeout=10, what="the exit's report")
    exit_report = next(r for r in server2.reports if r.get("exited"))
    assert exit_report["leases"] and exit_report["leases"][-1]["lease"] == 1 or server2.lease_reports(1)
    final = server2.exited[1]["usage"]
    assert server2.lease_reports(1)[-1]["samples"] == final["samples"]
    # A refused command (no job for that lease) goes at once too.
    refused = server2.stop_lease("release", 77)
    wait_for(lambda: refused in server2.acks, timeout=10, what="the refusal")
    assert server2.acks[refused]["result"] == "refused"
    assert len(server2.reports) <= 6  # the first, the bind's, the exit's, the refusal's (30 s interval)
    # Nothing went by protocol 1: no heartbeat, usage, ack, started or exited request.
    assert server2.v1_calls == []
    assert agent2.terminate() == 0


def test_the_interval_is_the_servers_and_every_sample_is_kept(server2, agent2):
    server2.report_seconds = 1.0
    agent2.start()
    _first_report(server2)
    time.sleep(4)
    reports = list(server2.reports)
    assert 3 <= len(reports) <= 7  # about one a second, not one per 0.2 s sample
    ticks = [t for r in reports if r.get("usage") for t in r["usage"]["t"]]
    assert len(ticks) >= 15  # every sample (0.2 s) is in some report, once, in order
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    seqs = [r["seq"] for r in reports]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_spooled_backlog_goes_in_bounded_chunks_oldest_first(server2, agent2):
    """Ticks left from an earlier run (epoch 1, as after a long outage): at most MAX_TICKS a report, one
    report a request, oldest first, each tick once."""
    state = StateDir(agent2.state_dir)
    start = time.time() - 3 * 3600
    for seq in range(1, 801):
        tick = usage.report(boot_epoch=1, seq=seq, now=start + 10 * seq, samples=[], jobs=[])
        state.spool_put(state.report_name(1, seq), tick)
    state.meta.boot_epoch = 1
    state.save_meta()
    state.close()
    agent2.start()
    old_end = start + 10 * 800 + 1

    def old_ticks() -> int:
        return sum(t < old_end for r in list(server2.reports) if r.get("usage") for t in r["usage"]["t"])

    wait_for(lambda: old_ticks() >= 800, timeout=30, what="the backlog to drain")
    chunks = [len(r["usage"]["t"]) for r in server2.reports if r.get("usage")]
    assert max(chunks) <= usage.MAX_TICKS and chunks[:3] == [360, 360, 80]
    ticks = [t for r in server2.reports if r.get("usage") for t in r["usage"]["t"]]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks) >= 800
    assert all(r["boot_epoch"] == 2 for r in server2.reports)  # this run's reports, carrying the old ticks


def test_a_report_lost_in_flight_is_sent_again_with_the_same_seq(server2, agent2):
    server2.report_seconds = 0.5
    server2.usage_answers = [503, 503]
    agent2.start()
    wait_for(lambda: len(server2.reports) >= 2, timeout=20, what="reports after the 503s")
    refused = [(e, s) for _, e, s in server2.usage_refused]
    assert refused[0] == refused[1] == (server2.reports[0]["boot_epoch"], server2.reports[0]["seq"]) == (1, 1)
    # The same report each time: its samples are those of the first try (assembled once, in the outbox).
    ticks = [t for r in server2.reports if r.get("usage") for t in r["usage"]["t"]]
    assert len(set(ticks)) == len(ticks)


def test_columns_from_ticks():
    ticks = [
        {
            "sent_at": "2026-11-29T04:00:00+00:00",
            "gpus": [
                {
                    "uuid": "GPU-a",
                    "util_pct": 97,
                    "mem_used_mb": 30000,
                    "power_w": 300.0,
                    "energy_j": 10.0,
                    "processes": [
                        {"pid": 1, "used_mb": 1, "lease": 41},
                        {"pid": 2, "used_mb": 1, "lease": None},
                    ],
                },
                {
                    "uuid": "GPU-b",
                    "util_pct": 0,
                    "mem_used_mb": 0,
                    "power_w": 60.0,
                    "energy_j": 5.0,
                    "processes": [],
                },
            ],
            "leases": [{"lease": 41, "samples": 1}],
        },
    ]
    ticks.append(
        {**ticks[0], "sent_at": "2026-11-29T04:00:10+00:00", "leases": [{"lease": 41, "samples": 2}]}
    )
    cols = usage.columns(ticks)
    assert cols is not None
    assert cols["gpus"] == ["GPU-a", "GPU-b"] and cols["t"][1] - cols["t"][0] == 10
    assert cols["lease"] == [[41, 0], [41, 0]] and cols["foreign"] == [[1, 0], [1, 0]]
    assert cols["processes"] == [
        {"gpu": "GPU-a", "pid": 1, "used_mb": 1, "lease": 41},
        {"gpu": "GPU-a", "pid": 2, "used_mb": 1, "lease": None},
    ]
    assert usage.newest_counters(ticks) == [{"lease": 41, "samples": 2}]
