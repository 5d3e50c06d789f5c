"""Faults: the server away for a while, the agent SIGKILLed and restarted, jobs that end while it is away."""

from __future__ import annotations

import os
import signal
import time

from tests.agent.fakeserver import wait_for
from tests.agent.test_jobs import JOBS, PY, demo, registered


def _keys(server):
    return [(r["boot_epoch"], r["seq"]) for r in server.usage]


def test_reports_are_spooled_through_an_outage_and_delivered_in_order_once(server, agent):
    gpus = registered(server, agent.start())
    server.bind(1, demo(120), gpus=gpus[:1])
    wait_for(lambda: server.lease_reports(1), what="a first report on the lease")
    server.stop()
    time.sleep(2.5)  # a dozen samples at 0.2 s
    spool = sorted((agent.state_dir / "spool").glob("*.json"))
    spooled = [p.name for p in spool]
    assert len(spooled) >= 5
    # Log tails are added when sent: 64 KiB a job a sample stays off the disk.
    assert "log_tail" not in spool[-1].read_text()
    server.start()
    wait_for(
        lambda: not list((agent.state_dir / "spool").glob("*.json")), timeout=30, what="the spool to drain"
    )
    keys = _keys(server)
    assert len(keys) == len(set(keys))  # none twice
    assert keys == sorted(keys) and [seq for _, seq in keys] == list(
        range(1, len(keys) + 1)
    )  # in order, none lost
    delivered = {f"{e:010d}-{s:012d}.json" for e, s in keys}
    assert set(spooled) <= delivered
    counters = server.lease_reports(1)
    assert all(a["gpu_seconds"] <= b["gpu_seconds"] for a, b in zip(counters, counters[1:], strict=False))
    assert all(a["samples"] <= b["samples"] for a, b in zip(counters, counters[1:], strict=False))
    assert "starting from scratch" in counters[-1]["log_tail"]
    assert "retry" in agent.log and "server reachable again" in agent.log


def test_an_agent_killed_mid_job_adopts_it_on_restart_without_counting_twice(server, agent):
    gpus = registered(server, agent.start())
    server.bind(2, demo(120), gpus=gpus)
    wait_for(lambda: len(server.lease_reports(2)) >= 5, what="reports on the lease")
    agent.kill()
    before = server.lease_reports(2)[-1]
    pid = agent.job(2)["pid"]
    time.sleep(1.5)
    os.kill(pid, 0)  # the job outlived its agent
    agent.start()
    wait_for(
        lambda: any(r["boot_epoch"] == 2 for r in server.usage if r["leases"]), what="reports after restart"
    )
    assert f"job 1002 (pid {pid}) adopted" in agent.log
    by_epoch = {
        e: [c for r in server.usage if r["boot_epoch"] == e for c in r["leases"] if c["lease"] == 2]
        for e in (1, 2)
    }
    after, last = by_epoch[2][0], by_epoch[1][-1]  # reports spooled before the kill arrive after the restart
    # Counters go on from where they were saved: one more sample (none if the kill fell between spooling a
    # report and saving the record), never restarted from zero nor counted twice.
    assert last["samples"] <= after["samples"] <= last["samples"] + 1
    # The 1.5 s the agent was down still count as held, once: 2 GPUs x the time since the start.
    assert after["gpu_seconds"] >= before["gpu_seconds"] + 2 * 1.5
    assert [r["seq"] for r in server.usage if r["boot_epoch"] == 2][0] == 1  # a new epoch starts at seq 1
    server.stop_lease("preempt", 2, grace=10)
    wait_for(lambda: 2 in server.exited, what="the exit report")
    record = agent.job(2)
    held = record["outcome"]["ended_at"] - record["started_at"]
    final = server.exited[2]["usage"]
    assert abs(final["gpu_seconds"] - 2 * held) < 0.01
    assert final["gpu_seconds"] >= max(c["gpu_seconds"] for c in server.lease_reports(2))
    assert server.exited[2]["exit_code"] == 0 and server.exit_calls == [2]


def test_jobs_that_ended_while_the_agent_was_away_are_reported(server, agent):
    gpus = registered(server, agent.start())
    server.bind(3, demo(0.5), gpus=gpus[:1])  # ends on its own: the shim writes its exit code
    server.bind(4, f"{PY} {JOBS / 'stubborn.py'}", gpus=gpus[1:])  # killed outright: nobody saw how
    wait_for(lambda: 3 in server.started and 4 in server.started, what="both starts")
    agent.kill()
    os.killpg(agent.job(4)["pid"], signal.SIGKILL)
    time.sleep(1.5)
    agent.start()
    wait_for(lambda: 3 in server.exited and 4 in server.exited, what="both exits")
    assert (server.exited[3]["exit_code"], server.exited[3]["signal"]) == (0, None)
    assert (server.exited[4]["exit_code"], server.exited[4]["signal"], server.exited[4]["stopped_by"]) == (
        None,
        None,
        None,
    )  # unknown: counted as failed by the server
    assert sorted(server.exit_calls) == [3, 4]
