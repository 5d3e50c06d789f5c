"""The agent process against the fake server: registration, binding, stopping, expiry, refusals."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from tests.agent.conftest import AgentProcess
from tests.agent.fakeserver import FakeServer, wait_for

JOBS = Path(__file__).with_name("jobs")
PY = shlex.quote(sys.executable)


def envdump(out: Path, code: int = 0, *extra: str) -> str:
    return " ".join([PY, str(JOBS / "envdump.py"), str(out), str(code), *map(shlex.quote, extra)])


def demo(seconds: float) -> str:
    return f"{PY} -m nodeagent.agent.demo_job --seconds {seconds}"


def registered(server: FakeServer, agent: AgentProcess) -> list[str]:
    """The agent's GPUs, once it registered and stored its credential (its first heartbeat uses it)."""
    wait_for(lambda: server.heartbeats, what="registration and a first heartbeat")
    return server.gpus()


def test_registers_with_the_bootstrap_token_and_keeps_the_credential_private(server, agent):
    gpus = registered(server, agent.start())
    status, body = server.registrations[0]
    assert status == 201 and body["name"] == "node-a" and len(gpus) == 2
    assert [g["index"] for g in body["gpus"]] == [0, 1]
    assert body["gpus"][0]["model"] == "NVIDIA H100 80GB HBM3" and body["gpus"][0]["memory_mb"] == 81920
    credential = agent.state_dir / "credential"
    assert credential.read_text() == server.credential
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600
    assert agent.terminate() == 0


def test_registers_again_with_its_credential_and_the_same_gpus(server, agent):
    first = registered(server, agent.start())
    assert agent.terminate() == 0
    agent.start()
    wait_for(lambda: len(server.registrations) == 2, what="re-registration")
    status, body = server.registrations[1]
    assert status == 200 and [g["uuid"] for g in body["gpus"]] == first  # stable simulated UUIDs
    assert json.loads((agent.state_dir / "state.json").read_text())["boot_epoch"] == 2


def test_bind_runs_the_command_without_a_shell_with_only_the_job_environment(server, agent, tmp_path):
    gpus = registered(server, agent.start())
    out = tmp_path / "env.json"
    command = envdump(out, 0, "$(touch pwned)", ";", "echo", "$HOME", "|", "cat")
    cmd_id = server.bind(7, command, gpus=gpus)
    wait_for(lambda: out.exists() and out.stat().st_size, what="the job's env dump")
    seen = json.loads(out.read_text())
    assert seen["argv"] == ["$(touch pwned)", ";", "echo", "$HOME", "|", "cat"]  # literal arguments
    assert not (Path(seen["cwd"]) / "pwned").exists()
    env = seen["env"]
    assert set(env) == {
        "PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "GPUMARKET_JOB_ID", "GPUMARKET_LEASE_ID",
        "GPUMARKET_CHECKPOINT_DIR", *GANG_VARIABLES,
    }  # fmt: skip
    # A bind without a gang (a server from before gangs) is a gang of one on this node.
    assert (env["NNODES"], env["NODE_RANK"], env["MASTER_ADDR"]) == ("1", "0", "127.0.0.1")
    assert "GPUMARKET_BOOTSTRAP_TOKEN" not in env  # the agent's own secrets stay with the agent
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(gpus)
    assert (env["GPUMARKET_JOB_ID"], env["GPUMARKET_LEASE_ID"]) == ("1007", "7")
    assert env["GPUMARKET_CHECKPOINT_DIR"] == str(agent.state_dir / "checkpoints" / "1007")
    assert seen["cwd"] == str(agent.state_dir / "run" / "7" / "work")
    # Its own session and process group, led by the shim (the job's parent), not the agent's.
    assert seen["sid"] == seen["pgid"] != os.getsid(agent.proc.pid) and seen["pgid"] != seen["pid"]
    wait_for(lambda: 7 in server.exited, what="the exit report")
    assert server.acks[cmd_id]["result"] == "applied"
    exited = server.exited[7]
    assert (exited["exit_code"], exited["signal"], exited["stopped_by"]) == (0, None, None)
    assert 7 in server.started
    log = agent.job_log(7)
    assert "envdump wrote" in log and "to stderr too" in log
    assert "envdump wrote" in exited["usage"]["log_tail"]
    assert exited["usage"]["gpu_seconds"] > 0


GANG_VARIABLES = (
    "GPUMARKET_NODE_RANK", "GPUMARKET_NNODES", "GPUMARKET_GPUS_PER_NODE", "GPUMARKET_GANG_GPUS",
    "GPUMARKET_NODES", "GPUMARKET_RDZV_ADDR", "GPUMARKET_RDZV_PORT", "MASTER_ADDR", "MASTER_PORT", "NNODES",
    "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
)  # fmt: skip


def test_a_gang_bind_gives_the_job_its_rank_the_nodes_and_the_rendezvous(server, agent, tmp_path):
    gpus = registered(server, agent.start())
    out = tmp_path / "env.json"
    gang = {
        "rank": 1, "nnodes": 2, "gpus_per_node": len(gpus), "gang_gpus": 2 * len(gpus),
        "nodes": ["10.0.0.2", "gpu-b.example.org"], "rdzv_addr": "10.0.0.2", "rdzv_port": 29507,
    }  # fmt: skip
    server.bind(8, envdump(out), gpus=gpus, gang=gang)
    wait_for(lambda: out.exists() and out.stat().st_size, what="the job's env dump")
    env = json.loads(out.read_text())["env"]
    assert {k: env[k] for k in GANG_VARIABLES} == {
        "GPUMARKET_NODE_RANK": "1", "GPUMARKET_NNODES": "2", "GPUMARKET_GPUS_PER_NODE": str(len(gpus)),
        "GPUMARKET_GANG_GPUS": str(2 * len(gpus)), "GPUMARKET_NODES": "10.0.0.2,gpu-b.example.org",
        "GPUMARKET_RDZV_ADDR": "10.0.0.2", "GPUMARKET_RDZV_PORT": "29507", "MASTER_ADDR": "10.0.0.2",
        "MASTER_PORT": "29507", "NNODES": "2", "NODE_RANK": "1", "WORLD_SIZE": "2", "RANK": "1",
        "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
    }  # fmt: skip


def test_a_bind_with_a_malformed_gang_is_refused(server, agent):
    gpus = registered(server, agent.start())
    bad = {
        "rank": 0,
        "nnodes": 2,
        "nodes": ["10.0.0.2", "$(reboot)"],
        "rdzv_addr": "10.0.0.2",
        "rdzv_port": 1,
    }
    cmd_id = server.bind(9, demo(1), gpus=gpus, gang=bad)
    wait_for(lambda: cmd_id in server.acks, what="the bind's answer")
    assert (
        server.acks[cmd_id]["result"] == "refused" and "not a node address" in server.acks[cmd_id]["detail"]
    )
    out_of_gang = {"rank": 2, "nnodes": 2, "nodes": [], "rdzv_addr": "10.0.0.2", "rdzv_port": 29500}
    cmd_id = server.bind(10, demo(1), gpus=gpus, gang=out_of_gang)
    wait_for(lambda: cmd_id in server.acks, what="the bind's answer")
    assert server.acks[cmd_id]["result"] == "refused"


def test_a_failing_job_reports_its_code_and_a_missing_program_127(server, agent, tmp_path):
    gpus = registered(server, agent.start())
    server.bind(1, envdump(tmp_path / "x.json", 3), gpus=gpus[:1])
    server.bind(2, "/no/such/program --flag", gpus=gpus[1:])
    wait_for(lambda: 1 in server.exited and 2 in server.exited, what="both exits")
    assert server.exited[1]["exit_code"] == 3
    assert server.exited[2]["exit_code"] == 127
    assert "cannot run '/no/such/program'" in server.exited[2]["usage"]["log_tail"]


def test_preempt_gives_sigterm_and_the_grace_period_for_a_checkpoint(server, agent):
    gpus = registered(server, agent.start())
    server.bind(3, demo(120), gpus=gpus)
    wait_for(lambda: 3 in server.started, what="the start report")
    wait_for(lambda: "starting from scratch" in agent.job_log(3), what="output")
    server.stop_lease("preempt", 3, grace=10)
    wait_for(lambda: 3 in server.exited, what="the exit report")
    exited = server.exited[3]
    assert (exited["exit_code"], exited["signal"], exited["stopped_by"]) == (0, None, "preempt")
    checkpoint = agent.state_dir / "checkpoints" / "1003" / "demo_job.json"
    assert json.loads(checkpoint.read_text())["done_seconds"] > 0
    assert "SIGTERM: checkpoint saved" in exited["usage"]["log_tail"]
    # The requeued job (a new lease) finds the same checkpoint directory and resumes.
    server.queue(
        "bind",
        4,
        {"lease": 4, "job": 1003, "name": "again", "command": demo(0.5), "gpus": gpus, "max_seconds": 60},
    )
    wait_for(lambda: 4 in server.exited, what="the second run's exit")
    assert "resuming at" in server.exited[4]["usage"]["log_tail"]


def test_a_job_that_ignores_sigterm_is_killed_when_the_grace_period_ends(server, agent):
    gpus = registered(server, agent.start())
    server.bind(5, f"{PY} {JOBS / 'stubborn.py'}", gpus=gpus[:1])
    wait_for(lambda: "stubborn running" in agent.job_log(5), what="the job")
    server.stop_lease("release", 5, grace=1.5)
    wait_for(lambda: 5 in server.exited, what="the exit report")
    exited = server.exited[5]
    assert (exited["exit_code"], exited["signal"], exited["stopped_by"]) == (None, 9, "release")
    assert (agent.state_dir / "checkpoints" / "1005" / "got-sigterm").exists()  # it was asked first
    record = agent.job(5)
    assert record["killed"] and record["outcome"]["ended_at"] >= record["kill_at"]  # after its grace period


def test_expiry_is_enforced_while_the_server_is_down(server, agent):
    gpus = registered(server, agent.start())
    server.bind(6, demo(120), gpus=gpus[:1], max_seconds=2, grace=5)
    wait_for(lambda: 6 in server.started, what="the start report")
    server.stop()
    record = wait_for(lambda: agent.job(6)["outcome"], timeout=20, what="the job's end without the server")
    assert record["exit_code"] == 0 and agent.job(6)["stopped_by"] == "expiry"
    assert "server unavailable" in agent.log
    server.start()
    wait_for(lambda: 6 in server.exited, timeout=30, what="the exit report after the outage")
    exited = server.exited[6]
    assert exited["stopped_by"] == "expiry" and 2 <= exited["usage"]["gpu_seconds"] < 6


def test_commands_with_a_stale_fence_or_past_expiry_are_refused(server, agent, tmp_path):
    gpus = registered(server, agent.start())
    server.fence = 5
    applied = server.bind(1, envdump(tmp_path / "a.json"), gpus=gpus[:1])
    server.fence = 4
    stale = server.bind(2, envdump(tmp_path / "b.json"), gpus=gpus[1:])
    server.fence = 5
    late = server.queue(
        "bind", 3, {"lease": 3, "job": 3, "command": "true", "gpus": gpus, "max_seconds": 60},
        expires_at="2020-01-01T00:00:00+00:00",
    )  # fmt: skip
    bad_quote = server.bind(4, "python 'unterminated", gpus=gpus)
    foreign = server.bind(5, "true", gpus=["GPU-not-here"])
    malformed = server.queue(
        "bind", 6, {"lease": 6, "job": 6, "command": "true", "gpus": gpus}
    )  # no max_seconds
    strange = server.queue("reboot", 7, {})
    unknown = server.stop_lease("preempt", 99)
    wait_for(lambda: unknown in server.acks, what="all acknowledgements")
    acks = server.acks
    assert acks[applied]["result"] == "applied"
    assert acks[stale] == {"result": "refused", "detail": "fence 4 is below the highest applied fence 5"}
    assert acks[late]["result"] == "refused" and "expired" in acks[late]["detail"]
    assert acks[bad_quote]["result"] == "refused" and "cannot be split" in acks[bad_quote]["detail"]
    assert acks[foreign]["result"] == "refused" and "GPUs is on this node" in acks[foreign]["detail"]
    assert acks[unknown]["result"] == "refused" and "no job for lease 99" in acks[unknown]["detail"]
    assert acks[malformed] == {"result": "refused", "detail": "malformed command: KeyError: 'max_seconds'"}
    assert acks[strange] == {"result": "refused", "detail": "unknown command kind 'reboot'"}
    assert not (tmp_path / "b.json").exists()
    assert not {2, 3, 4, 5, 6} & set(server.started)


def test_sigterm_leaves_jobs_running_and_exits_zero(server, agent):
    gpus = registered(server, agent.start())
    server.bind(8, demo(120), gpus=gpus[:1])
    wait_for(lambda: 8 in server.started, what="the start report")
    assert agent.terminate() == 0
    pid = agent.job(8)["pid"]
    os.kill(pid, 0)  # still there
    assert "job(s) left running" in agent.log


def test_with_job_user_the_job_runs_unprivileged_and_cannot_read_the_credential(server, tmp_path):
    """--job-user: the job runs as nobody and the state directory is closed to it. As a non-root agent the
    flag is refused at start instead (it needs root to switch users)."""
    root = Path(tempfile.mkdtemp(prefix="gpumarket-ckpt-"))
    root.chmod(0o755)  # the job user must reach its checkpoint directory
    agent = AgentProcess(server, tmp_path, **{"job-user": "nobody", "checkpoint-root": root})
    agent.start()
    assert agent.proc is not None
    if os.geteuid() != 0:
        assert agent.proc.wait(20) == 1 and "--job-user needs the agent to run as root" in agent.log
        return
    try:
        gpus = registered(server, agent)
        script = "id -u; echo HOME=$HOME; cat ../../../credential || echo no-credential; touch $GPUMARKET_CHECKPOINT_DIR/ok"
        server.bind(9, f"/bin/sh -c {shlex.quote(script)}", gpus=gpus[:1])
        wait_for(lambda: 9 in server.exited, what="the exit report")
        log = agent.job_log(9)
        assert int(log.splitlines()[0]) == pwd.getpwnam("nobody").pw_uid
        assert "no-credential" in log and server.credential not in log
        assert "HOME=/root" not in log
        assert (root / "1009" / "ok").exists() and os.stat(root / "1009" / "ok").st_uid != 0
    finally:
        if agent.proc.poll() is None:
            agent.terminate()
        shutil.rmtree(root)
