"""Each job confined to what it won: the agent as a real process with --sandbox on, and jobs that try to get out.

Runs as root with bubblewrap (scripts/ensure-services installs it); the GPUs' device nodes are character
devices made here with mknod (major 195), so the same code runs on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent import sandbox_cgroups, sandbox_users
from tests.agent.conftest import AgentProcess
from tests.agent.fakeserver import FakeServer, wait_for

JOBS = Path(__file__).with_name("jobs")
# A Python the tenants' users can run (the test's own may live under /root, which they cannot enter).
PY = "/usr/bin/python3"
UIDS = "62000-62999"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or not os.access(PY, os.X_OK),
    reason="the sandbox needs root, bubblewrap (scripts/ensure-services installs it) and /usr/bin/python3",
)


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    """A device root like a 4-GPU node's /dev: nvidia0-3, the control nodes and nvidia-caps."""
    root = tmp_path / "dev"
    (root / "nvidia-caps").mkdir(parents=True)
    nodes = {f"nvidia{i}": i for i in range(4)} | {
        "nvidiactl": 255,
        "nvidia-uvm": 254,
        "nvidia-uvm-tools": 253,
    }
    for name, minor in nodes.items():
        os.mknod(root / name, 0o20666, os.makedev(195, minor))
        os.chmod(root / name, 0o666)  # as the driver makes them: the node's mode is no guard
    os.mknod(root / "nvidia-caps" / "nvidia-cap1", 0o20444, os.makedev(511, 1))
    return root


@pytest.fixture
def tenants() -> Iterator[list[str]]:
    """Tenant slugs unique to this test; their users are removed afterwards."""
    slugs = [f"t{os.getpid()}{c}" for c in "abc"]
    yield slugs
    for slug in slugs:
        name = sandbox_users.user_name(slug)
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)


def sandboxed(server: FakeServer, tmp_path: Path, devices: Path, **flags: object) -> AgentProcess:
    agent = AgentProcess(
        server,
        tmp_path,
        **{"sim-gpus": 4, "sandbox": "on", "device-root": devices, "tenant-uids": UIDS, **flags},
    )
    agent.start()
    wait_for(lambda: server.heartbeats, what="registration and a first heartbeat")
    return agent


def probe(agent: AgentProcess, lease: int) -> dict[str, Any]:
    for line in agent.job_log(lease).splitlines():
        if line.startswith("PROBE "):
            return dict(json.loads(line[6:]))
    raise AssertionError(f"no probe output in lease {lease}'s log:\n{agent.job_log(lease)}")


def started(agent: AgentProcess, lease: int, marker: str) -> bool:
    return (agent.state_dir / "jobs" / f"{lease}.json").exists() and marker in agent.job_log(lease)


def sleeper(seconds: float = 60) -> str:
    return f"{PY} -c 'import time; print(\"sleeping\", flush=True); time.sleep({seconds})'"


@pytest.fixture
def agent_killed() -> Iterator[list[AgentProcess]]:
    made: list[AgentProcess] = []
    yield made
    for agent in made:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.kill()
        records = [json.loads(p.read_text()) for p in (agent.state_dir / "jobs").glob("**/*.json")]
        for record in records:
            if record.get("pid") and record.get("outcome") is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record["pid"], 9)
        for record in records:  # the job's cgroups, which its agent (killed) did not remove
            for _ in range(50):
                if sandbox_cgroups.remove(record.get("cgroups", [])):
                    break
                time.sleep(0.02)


def test_a_job_sees_only_its_gpus_its_processes_and_its_directories(
    server, tmp_path, devices, tenants, agent_killed
):
    agent = sandboxed(server, tmp_path, devices)
    agent_killed.append(agent)
    gpus = server.gpus()
    server.bind(1, sleeper(), gpus=gpus[:2], tenant=tenants[0])  # another tenant's job, on GPUs 0 and 1
    wait_for(lambda: started(agent, 1, "sleeping"), what="the first job")
    other = agent.job(1)
    assert agent.proc is not None
    outside = [agent.proc.pid, other["pid"]]
    paths = [
        str(agent.state_dir / "credential"),
        str(agent.state_dir),
        other["work_dir"],
        other["log_path"],
        other["checkpoint_dir"],
        str(agent.state_dir / "checkpoints"),
        str(devices),
    ]
    command = " ".join([PY, str(JOBS / "sandbox_probe.py"), *map(str, outside), "--", *paths])
    # GPU 2 is the job's; it unsets nothing, it just tries every node: only its own exists.
    server.bind(2, command, gpus=gpus[2:3], tenant=tenants[1])
    wait_for(lambda: 2 in server.exited, what="the probe's exit")
    seen = probe(agent, 2)

    # GPUs: its own node and the control nodes, nothing else; another GPU's node cannot be opened or made.
    assert {d for d in seen["dev"] if "nvidia" in d} == {
        "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps",
    }  # fmt: skip
    # Its own node opens (ENXIO here: no driver behind the test's node; "ok" on a GPU); the others do not exist.
    opened = seen["nvidia_opened"]
    assert opened.pop("nvidia2") in ("ok", "ENXIO")
    assert opened == {"nvidia0": "ENOENT", "nvidia1": "ENOENT", "nvidia3": "ENOENT"}
    assert seen["mknod"] == "EPERM"
    # Processes: only its own (the sandbox's init and itself); the agent and the other job cannot be named.
    assert seen["proc"] == [1, 2]
    assert set(seen["kill"].values()) == {"ESRCH"}
    assert set(seen["environ"].values()) == {"ENOENT"}
    assert agent.proc.poll() is None and agent.job(1)["outcome"] is None  # both still running
    # Files: no credential, no other job's directories or log, no device root; the system read-only.
    read = seen["read"]
    assert read[str(agent.state_dir / "credential")] == "ENOENT"
    assert read[other["work_dir"]] == read[other["log_path"]] == read[other["checkpoint_dir"]] == "ENOENT"
    assert sorted(read[str(agent.state_dir)]) == ["checkpoints", "run"]  # only the way to its own directories
    assert read[str(agent.state_dir / "checkpoints")] == ["1002"]
    assert read[str(devices)] == []
    assert seen["write_etc"] == seen["write_usr"] == "EROFS"
    assert seen["write_tmp"] == seen["write_shm"] == seen["write_work"] == seen["write_checkpoint"] == "ok"
    assert not Path("/tmp/gpumarket-probe").exists() and not Path("/dev/shm/gpumarket-probe").exists()
    # Users: each tenant its own, from the range, no groups, no way back to root.
    uid = pwd.getpwnam(sandbox_users.user_name(tenants[1])).pw_uid
    assert 62000 <= uid <= 62999 and seen["uid"] == uid and seen["gid"] == uid and seen["groups"] == []
    assert pwd.getpwnam(sandbox_users.user_name(tenants[0])).pw_uid != uid
    assert seen["setuid_root"] == "EPERM"
    ckpt = Path(agent.job(2)["checkpoint_dir"])
    assert (ckpt / "ckpt").stat().st_uid == uid and ckpt.stat().st_uid == uid
    assert server.exited[2]["exit_code"] == 0


def test_a_stop_gives_the_sandboxed_job_its_grace_period_then_sigkill(
    server, tmp_path, devices, tenants, agent_killed
):
    agent = sandboxed(server, tmp_path, devices)
    agent_killed.append(agent)
    gpus = server.gpus()
    server.bind(3, f"{PY} {JOBS / 'stubborn.py'}", gpus=gpus[:1], tenant=tenants[0])
    wait_for(lambda: "stubborn running" in agent.job_log(3), what="the stubborn job")
    server.stop_lease("preempt", 3, grace=1.5)
    wait_for(lambda: 3 in server.exited, what="the stubborn job's end")
    exited = server.exited[3]
    assert (exited["exit_code"], exited["signal"], exited["stopped_by"]) == (None, 9, "preempt")
    assert (Path(agent.job(3)["checkpoint_dir"]) / "got-sigterm").exists()  # SIGTERM reached it inside
    assert exited["reason"] is None


def test_a_job_over_its_memory_is_killed_and_said_out_of_memory(
    server, tmp_path, devices, tenants, agent_killed
):
    agent = sandboxed(server, tmp_path, devices)
    agent_killed.append(agent)
    limits = server.registrations[0][1]["capabilities"]["limits"]
    if limits["memory"] != "enforced":
        pytest.skip(f"this node cannot limit memory: {limits['memory']} (said at registration)")
    hog = f"{PY} -c 'b = bytearray(512 * 1024 * 1024); print(\"allocated\", flush=True)'"
    server.bind(4, hog, gpus=server.gpus()[:1], tenant=tenants[0], memory_mb=128)
    wait_for(lambda: 4 in server.exited, what="the memory hog's end")
    exited = server.exited[4]
    assert (exited["exit_code"], exited["signal"], exited["reason"]) == (None, 9, "out of memory")
    assert "allocated" not in agent.job_log(4)


def test_processes_and_cpu_are_limited_from_the_bind(server, tmp_path, devices, tenants, agent_killed):
    agent = sandboxed(server, tmp_path, devices)
    agent_killed.append(agent)
    limits = server.registrations[0][1]["capabilities"]["limits"]
    if limits["pids"] != "enforced" or limits["cpu"] != "enforced":
        pytest.skip(f"this node cannot limit processes or CPU: {limits} (said at registration)")
    forker = (
        f"{PY} -c 'import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(64):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        '    print("fork refused after", n, type(e).__name__, flush=True)\n'
        "time.sleep(30)'"
    )
    server.bind(5, forker, gpus=server.gpus()[:1], tenant=tenants[0], pids=16, cpus=0.5)
    wait_for(lambda: "fork refused after" in agent.job_log(5), what="the fork limit")
    refused_after = int(agent.job_log(5).split("fork refused after")[1].split()[0])
    assert refused_after < 16
    groups = agent.job(5)["cgroups"]
    quota = [Path(g, "cpu.cfs_quota_us") for g in groups if Path(g, "cpu.cfs_quota_us").exists()]
    quota_v2 = [Path(g, "cpu.max") for g in groups if Path(g, "cpu.max").exists()]
    assert [q.read_text().strip() for q in quota] == ["50000"] or quota_v2[0].read_text().split()[
        0
    ] == "50000"
    server.stop_lease("release", 5, grace=0.5)
    wait_for(lambda: 5 in server.exited, what="the forker's end")
    wait_for(lambda: not any(Path(g).exists() for g in groups), what="the job's cgroups removed")


def test_registration_says_what_the_node_enforces(server, tmp_path, devices, agent_killed):
    agent = sandboxed(server, tmp_path, devices, **{"log-max-bytes": 65536})
    agent_killed.append(agent)
    caps = server.registrations[0][1]["capabilities"]
    assert (
        caps["sandbox"] == "enforced"
        and caps["tenant_users"] == "enforced"
        and caps["log_max_bytes"] == 65536
    )
    assert caps["cgroup"] in ("v1", "v2")
    assert set(caps["limits"]) == {"memory", "cpu", "pids"}


def test_a_node_whose_kernel_refuses_the_sandbox_says_so_and_runs_jobs_unconfined(
    server, tmp_path, devices, agent_killed, monkeypatch
):
    monkeypatch.setenv("GPUMARKET_BWRAP", "false")  # a bwrap that fails, as on a kernel without namespaces
    agent = sandboxed(server, tmp_path, devices, sandbox="auto")
    agent_killed.append(agent)
    caps = server.registrations[0][1]["capabilities"]
    assert caps["sandbox"].startswith("unavailable: the kernel refused the sandbox")
    server.bind(
        6, f'{PY} -c \'import os; print("devs", sorted(os.listdir("/dev"))[:3])\'', gpus=server.gpus()[:1]
    )
    wait_for(lambda: 6 in server.exited, what="the unconfined job")
    assert server.exited[6]["exit_code"] == 0


def test_sandbox_on_refuses_to_start_where_it_cannot(server, tmp_path, devices, monkeypatch):
    monkeypatch.setenv("GPUMARKET_BWRAP", "false")
    agent = AgentProcess(server, tmp_path, sandbox="on", **{"device-root": devices}).start()
    assert agent.proc is not None
    assert agent.proc.wait(30) == 1
    assert "--sandbox on: the kernel refused the sandbox" in agent.log


def test_jobs_started_before_the_sandbox_keep_running_through_the_upgrade(
    server, tmp_path, devices, tenants, agent_killed
):
    agent = AgentProcess(server, tmp_path, **{"sim-gpus": 4}).start()  # an agent from before: no sandbox
    agent_killed.append(agent)
    wait_for(lambda: server.heartbeats, what="registration")
    gpus = server.gpus()
    server.bind(7, sleeper(), gpus=gpus[:1])
    wait_for(lambda: "sleeping" in agent.job_log(7), what="the unconfined job")
    old_pid = agent.job(7)["pid"]
    assert agent.terminate() == 0
    agent.flags.update({"sandbox": "on", "device-root": devices, "tenant-uids": UIDS})
    agent.start()
    wait_for(lambda: len(server.registrations) == 2, what="the upgraded agent's registration")
    server.bind(8, sleeper(), gpus=gpus[1:2], tenant=tenants[0])
    wait_for(lambda: "sleeping" in agent.job_log(8), what="the sandboxed job")
    assert (
        agent.job(7)["pid"] == old_pid and agent.job(7)["outcome"] is None and not agent.job(7)["sandboxed"]
    )
    assert agent.job(8)["sandboxed"]
    server.stop_lease("release", 7, grace=1)
    server.stop_lease("release", 8, grace=1)
    wait_for(lambda: 7 in server.exited and 8 in server.exited, what="both ends")
    assert server.exited[7]["stopped_by"] == server.exited[8]["stopped_by"] == "release"


def test_a_log_over_its_cap_loses_its_oldest_part_and_says_so(
    server, tmp_path, devices, tenants, agent_killed
):
    agent = sandboxed(server, tmp_path, devices, **{"log-max-bytes": 65536})
    agent_killed.append(agent)
    chatty = (
        f"{PY} -c 'import time\n"
        "for i in range(4000):\n"
        '    print(f"line {{i:05d}} " + "x" * 40, flush=True)\n'
        "    time.sleep(0.0005) if i % 100 == 0 else None\n"
        'print("last line", flush=True)\n'
        "time.sleep(2)'"
    )
    server.bind(9, chatty, gpus=server.gpus()[:1], tenant=tenants[0])
    wait_for(lambda: 9 in server.exited, what="the chatty job's end")
    text = agent.job_log(9)
    assert len(text.encode()) <= 65536 + 200
    assert "this log is capped at 65536 bytes: its oldest" in text
    assert "last line" in text and "line 00000 " not in text


# Between tenants: the GPU check and the foreign-process policy (work with or without the sandbox).


def faults(agent: AgentProcess, found: dict[str, Any]) -> None:
    path = agent.state_dir / "sim-faults.json"
    path.write_text(json.dumps(found))


def acked(server: FakeServer, cmd: int) -> dict[str, Any]:
    wait_for(lambda: cmd in server.acks, what=f"command {cmd}'s acknowledgement")
    return dict(server.acks[cmd])


def heartbeat_gpu(server: FakeServer, uuid: str) -> dict[str, Any]:
    for gpu in server.heartbeats[-1]["gpus"]:
        if gpu["uuid"] == uuid:
            return dict(gpu)
    raise AssertionError(uuid)


def events(server: FakeServer) -> list[dict[str, Any]]:
    return [e for beat in list(server.heartbeats) for e in beat.get("events", [])]


def test_a_gpu_passing_to_another_tenant_is_checked_and_drained_with_the_reason(server, agent):
    agent.flags["sim-gpus"] = 2
    agent.start()
    wait_for(lambda: server.heartbeats, what="registration")
    gpu0, gpu1 = server.gpus()
    server.bind(1, "true", gpus=[gpu0], tenant="alpha")
    server.bind(2, "true", gpus=[gpu1], tenant="alpha")
    wait_for(lambda: 1 in server.exited and 2 in server.exited, what="alpha's jobs")
    faults(agent, {gpu0: {"xid": 79}, gpu1: {"retired_pages_pending": True}})
    # The same tenant again: no check, the GPU is its own.
    assert acked(server, server.bind(3, "true", gpus=[gpu1], tenant="alpha"))["result"] == "applied"
    # Another tenant: checked, refused, drained with the reason the console shows.
    refused = acked(server, server.bind(4, "true", gpus=[gpu0], tenant="beta"))
    assert refused["result"] == "refused" and "XID 79 error" in refused["detail"]
    wait_for(lambda: not heartbeat_gpu(server, gpu0)["healthy"], what="the drained GPU in a heartbeat")
    assert heartbeat_gpu(server, gpu0)["error"] == "drained: XID 79 error"
    wait_for(lambda: any(e["kind"] == "gpu_drained" for e in events(server)), what="the drain event")
    # Drained: even its last tenant gets no job on it until it passes its check again.
    again = acked(server, server.bind(5, "true", gpus=[gpu0], tenant="alpha"))
    assert again["result"] == "refused" and "is drained: XID 79 error" in again["detail"]
    faults(agent, {})
    wait_for(lambda: heartbeat_gpu(server, gpu0)["healthy"], what="the GPU resumed")
    wait_for(lambda: any(e["kind"] == "gpu_resumed" for e in events(server)), what="the resume event")
    assert acked(server, server.bind(6, "true", gpus=[gpu0], tenant="beta"))["result"] == "applied"


def test_a_process_on_a_gpu_no_lease_holds_is_killed_after_the_grace_and_reported(server, agent):
    agent.flags.update({"sim-gpus": 2, "kill-foreign-after": 1})
    agent.start()
    wait_for(lambda: server.heartbeats, what="registration")
    gpu0, gpu1 = server.gpus()
    intruder = subprocess.Popen(["sleep", "300"])
    try:
        server.bind(1, sleeper(), gpus=[gpu0], tenant="alpha")
        wait_for(lambda: started(agent, 1, "sleeping"), what="the leased job")
        faults(agent, {gpu1: {"processes": [intruder.pid]}})
        started_at = time.monotonic()
        intruder.wait(20)
        assert time.monotonic() - started_at >= 0.9  # the grace period first
        assert intruder.returncode == -9
        wait_for(lambda: any(e["kind"] == "foreign_killed" for e in events(server)), what="the kill event")
        (event,) = [e for e in events(server) if e["kind"] == "foreign_killed"]
        assert (event["gpu"], event["pid"]) == (gpu1, intruder.pid)
        assert agent.job(1)["outcome"] is None  # the leased job's processes are not foreign
    finally:
        intruder.kill()
        server.stop_lease("release", 1, grace=0.5)
        wait_for(lambda: 1 in server.exited, what="the job's end")


def test_the_demo_job_runs_in_the_sandbox_as_make_run_starts_it(server, tmp_path, devices, agent_killed):
    """make run's agents as root: the sandbox, no tenant users where the demo's Python lives under /root (the
    job is then root with every capability dropped); the demo job checkpoints, is preempted, saves, exits 0."""
    agent = AgentProcess(
        server, tmp_path, **{"sim-gpus": 4, "sandbox": "auto", "device-root": devices}
    ).start()
    agent_killed.append(agent)
    wait_for(lambda: server.heartbeats, what="registration")
    assert server.registrations[0][1]["capabilities"]["sandbox"] == "enforced"
    demo = f"{shlex.quote(sys.executable)} -m nodeagent.agent.demo_job --seconds 30"
    server.bind(11, demo, gpus=server.gpus()[:1])
    wait_for(lambda: started(agent, 11, "CUDA_VISIBLE_DEVICES="), what="the demo job's first line")
    wait_for(lambda: (Path(agent.job(11)["checkpoint_dir"]) / "demo_job.json").exists(), what="a checkpoint")
    server.stop_lease("preempt", 11, grace=10)
    wait_for(lambda: 11 in server.exited, what="the demo job's end")
    assert (server.exited[11]["exit_code"], server.exited[11]["signal"]) == (0, None)


def test_tenant_users_are_made_once_kept_apart_and_refused_outside_the_rules(tenants):
    uids = range(62500, 62503)
    first = sandbox_users.tenant_user(tenants[0], uids)
    assert sandbox_users.tenant_user(tenants[0], uids) == first  # the same user at every later job
    second = sandbox_users.tenant_user(tenants[1], uids)
    assert second != first and second[0] in uids
    assert pwd.getpwuid(first[0]).pw_shell == "/usr/sbin/nologin"
    with pytest.raises(sandbox_users.NoTenantUser, match="is not a-z"):
        sandbox_users.tenant_user("../root", uids)
    with pytest.raises(sandbox_users.NoTenantUser, match="outside the tenants' range"):
        sandbox_users.tenant_user(tenants[0], range(63000, 63010))
    long = "a" * 60
    assert len(sandbox_users.user_name(long)) == 32 and sandbox_users.user_name(
        long
    ) != sandbox_users.user_name(long + "b")
    sandbox_users.tenant_user(tenants[2], uids)
    with pytest.raises(sandbox_users.NoTenantUser, match="no free uid left"):
        sandbox_users.tenant_user(f"t{os.getpid()}z", uids)


@pytest.mark.parametrize("where", ["ext4 or the like (collapse in place)", "tmpfs (copied)"])
def test_the_log_cap_keeps_the_newest_part_on_either_file_system(tmp_path, where):
    from nodeagent.agent import sandbox_logs

    base = Path("/dev/shm") if where.startswith("tmpfs") and Path("/dev/shm").is_dir() else tmp_path
    path = base / f"gpumarket-cap-{os.getpid()}.log"
    try:
        path.write_bytes(b"".join(f"line {i:06d}\n".encode() for i in range(20000)))  # 240,000 bytes
        assert sandbox_logs.cap(str(path), 1_000_000) == 0  # under the cap: untouched
        dropped = sandbox_logs.cap(str(path), 65536)
        text = path.read_text()
        assert dropped > 0 and dropped % 4096 == 0 and len(text) <= 65536 + 200
        assert text.endswith(sandbox_logs.notice(dropped, 65536).decode())
        assert "line 019999\n" in text and "line 000000" not in text
    finally:
        path.unlink(missing_ok=True)
