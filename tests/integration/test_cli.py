"""The `gpumarket` command line as a user runs it: a subprocess against a live server (pytest-django's
live_server), with a real Celery worker clearing the rounds and a real agent running the jobs for the newcomer
path, which runs README.md's own lines (extracted from it, so the README cannot drift from what works)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accounts.tokens import token_create
from market.models import Job, JobState
from tests.integration.cli_helpers import GPUMARKET, ROOT, LosingProxy, cli_env, run
from tests.integration.test_agent_e2e import cluster, run_round, worker_env  # noqa: F401 - fixtures, used by name

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

README_URL = "http://127.0.0.1:8000"
README_TOKEN = "var/demo_token"


def readme_newcomer_lines() -> list[str]:
    """The `gpumarket ...` lines of README.md's newcomer block (between its two markers)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- newcomer-path -->\n```sh\n(.*?)```\n<!-- /newcomer-path -->", text, re.S)
    assert block is not None, "README.md lost its newcomer-path block"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line.startswith("gpumarket ")]


def signed_in(tmp_path: Path, world: Any, url: str) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text(token_create(user=world.alice, tenant=world.alpha, name="cli").secret + "\n")
    env = cli_env(tmp_path / "config")
    done = run(["login", "--url", url, "--token-file", str(token)], env)
    assert done.returncode == 0, done.stderr
    return env


def test_the_readme_newcomer_path_runs_a_job_to_completion(cluster, tmp_path, monkeypatch):  # noqa: F811
    w = cluster["world"]
    # The demo job is `python -m nodeagent.agent.demo_job`: `python` is this checkout's, as under `make run`.
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    agent = cluster["agent"]()
    token = tmp_path / "demo_token"
    token.write_text(token_create(user=w.alice, tenant=w.alpha, name="demo").secret)
    env = cli_env(tmp_path / "config", PATH=os.environ["PATH"])
    lines = readme_newcomer_lines()
    assert [shlex.split(line)[1] for line in lines] == ["login", "submit", "jobs"]
    outputs = []
    for line in lines:
        line = line.replace(README_URL, cluster["live_url"]).replace(README_TOKEN, str(token))
        proc = subprocess.Popen(
            ["bash", "-c", line], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # submit --wait: the test clears the rounds a beat would (a fresh round while the job waits).
        while proc.poll() is None:
            if Job.objects.filter(state=JobState.PENDING).exists():
                run_round(cluster)
            time.sleep(0.5)
        out, err = proc.communicate()
        print(f"$ {line}\n{out}{err}")  # shown on a failure (or with -s)
        assert proc.returncode == 0, f"{line}\n{out}\n{err}\n{agent.tail()}"
        outputs.append(out)
    login, submitted, listed = outputs
    assert "Signed in to" in login and "alice" in login
    mode = stat.S_IMODE((tmp_path / "config" / "gpumarket" / "profiles.json").stat().st_mode)
    assert mode == 0o600
    job = Job.objects.get()
    assert job.state == JobState.COMPLETED
    assert "Estimate for 'resnet'" in submitted and f"Submitted job {job.pk}" in submitted
    assert "CUDA_VISIBLE_DEVICES" in submitted  # its log, as it ran
    assert re.search(rf"job {job.pk} completed, exit code 0; charged [0-9.]+ credits", submitted), submitted
    assert str(job.pk) in listed and "completed" in listed


def test_commands_against_the_live_server(world, live_server, tmp_path):
    world.fund(world.alpha, 1000)
    world.nodes(world.h100, 1, size=8)
    env = signed_in(tmp_path, world, live_server.url)
    me = json.loads(run(["whoami", "--json"], env).stdout)
    assert (me["username"], me["token_tenant"]) == ("alice", "alpha")
    flags = ["--name", "train", "--command", "python train.py", "--gpus", "2", "--max-hours", "1"]
    flags += ["--bid", "H100=5"]

    dry = run(["submit", *flags, "--dry-run", "--json"], env)
    assert dry.returncode == 0, dry.stderr
    estimate = json.loads(dry.stdout)
    assert estimate["job"] is None and not Job.objects.exists()
    assert estimate["estimate"]["guidance"][0]["gpu_type"] == "H100"
    assert estimate["estimate"]["guidance"][0]["tier"] in ("B", "S")
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: from-file\ncommand: python t.py\ngpus: 2\nbids:\n  H100: '5'\n")
    from_file = run(["submit", str(job_file), "--max-hours", "2", "--dry-run"], env)
    assert from_file.returncode == 0 and "Estimate for 'from-file': 2 GPUs, up to 2 h" in from_file.stdout
    human = run(["submit", *flags, "--dry-run"], env)
    assert "Estimate for 'train'" in human.stdout and "H100 at 5:" in human.stdout

    # A bad field: the API's message, naming it, and the exit code for a refusal; no traceback.
    bad = run(["submit", *flags[:-2], "--bid", "H100=5", "--max-hours", "0"], env)
    assert bad.returncode == 3, bad.stderr
    assert bad.stderr.startswith("error: max_hours:") and "Traceback" not in bad.stderr
    bad_json = run(["submit", *flags[:-2], "--bid", "B200=5", "--json"], env)
    assert bad_json.returncode == 3
    refused = json.loads(bad_json.stderr)
    assert refused["error"] == "invalid" and refused["field"].startswith("bids")

    # The same key twice (a script re-run after a lost answer): one job.
    first = json.loads(run(["submit", *flags, "--idempotency-key", "k-1", "--json"], env).stdout)["job"]
    again = json.loads(run(["submit", *flags, "--idempotency-key", "k-1", "--json"], env).stdout)["job"]
    assert first["id"] == again["id"] and Job.objects.count() == 1

    # A lost answer inside one invocation: the retry repeats the key, the server replays, one more job.
    host, port = live_server.url.rsplit("//", 1)[1].split(":")
    proxy = LosingProxy((host, int(port)), b"POST /api/v1/tenants/alpha/jobs ")
    try:
        token = json.loads((tmp_path / "config" / "gpumarket" / "profiles.json").read_text())
        profile = token["profiles"]["default"]
        via = {"GPUMARKET_URL": proxy.url, "GPUMARKET_TOKEN": profile["token"], "GPUMARKET_TENANT": "alpha"}
        lost = run(["submit", *flags, "--json"], {**env, **via})
    finally:
        proxy.close()
    assert lost.returncode == 0, lost.stderr
    assert proxy.dropped == 1 and Job.objects.count() == 2

    listed = json.loads(run(["jobs", "--json"], env).stdout)
    assert [j["id"] for j in listed] == sorted(Job.objects.values_list("pk", flat=True), reverse=True)
    assert {"state", "tier", "gpus", "node", "rounds_waited", "reason"} <= set(listed[0])

    cancelled = run(["cancel", str(first["id"]), "--json"], env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    shown = run(["show", str(first["id"])], env)
    assert f"job {first['id']} 'train': cancelled" in shown.stdout

    pending = json.loads(lost.stdout)["job"]["id"]
    waiting = run(["show", str(pending)], env)
    assert waiting.returncode == 0, waiting.stderr
    assert "queue:    #1 for H100" in waiting.stdout and "start:    H100:" in waiting.stdout, waiting.stdout
    # Ctrl-C while following stops the following, not the job, and says how to pick it up again.
    follower = subprocess.Popen(
        [*GPUMARKET, "wait", str(pending), "--interval", "0.2"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)
    follower.send_signal(signal.SIGINT)
    _, err = follower.communicate(timeout=30)
    assert (
        follower.returncode == 130 and f"Stopped following job {pending}; it carries on (pending)" in err
    ), err
    assert Job.objects.get(pk=pending).state == JobState.PENDING
    table = run(["jobs", "--state", "pending"], env)
    assert "pending" in table.stdout and "rounds)" in table.stdout and "cancelled" not in table.stdout

    missing = run(["show", "999999"], env)
    assert missing.returncode == 5 and missing.stderr.startswith("error: ")
    gone = run(
        ["jobs"],
        {**env, "GPUMARKET_URL": "http://127.0.0.1:9", "GPUMARKET_TOKEN": "x", "GPUMARKET_TENANT": "alpha"},
    )
    assert (
        gone.returncode == 6 and "cannot reach the server" in gone.stderr and "Traceback" not in gone.stderr
    )
    device = run(["login", "--device", "--url", live_server.url], env)
    assert device.returncode != 0 and "device sign-in is not configured on this server" in device.stderr


def test_admin_commands_against_the_live_server(world, live_server, tmp_path):
    from market.selectors.policy_snapshot import policy_snapshot
    from market.services.policy_proposals import policy_version_propose

    (node,) = world.nodes(world.h100, 1, size=8)
    draft = policy_version_propose(
        actor=world.admin, snapshot={"tenants": {"beta": {"weight": 9}}}, reason="more for beta"
    )
    token = tmp_path / "token"
    token.write_text(token_create(user=world.admin, tenant=world.alpha, name="cli").secret)
    env = cli_env(tmp_path / "config")
    assert (
        run(
            ["login", "--profile", "ops", "--url", live_server.url, "--token-file", str(token)], env
        ).returncode
        == 0
    )
    ops = ["--profile", "ops"]

    nodes = json.loads(run(["nodes", "--json", *ops], env).stdout)
    assert [n["name"] for n in nodes] == [node.name]
    drained = run(["drain", node.name, "--json", *ops], env)
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["state"] in ("draining", "drained")
    versions = json.loads(run(["policy", "versions", "--json", *ops], env).stdout)
    assert draft.number in [v["number"] for v in versions]
    diff = run(["policy", "diff", str(draft.number), *ops], env)
    assert "tenants.beta.weight: 2 -> 9" in diff.stdout, diff.stdout
    applied = run(["policy", "revert", str(draft.number), "--reason", "apply it", "--json", *ops], env)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["changed"] is True
    assert policy_snapshot()["tenants"]["beta"]["weight"] == 9
    no_reason = run(["policy", "revert", str(draft.number), *ops], env)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr

    # A member is not an admin: the API's refusal, and the exit code for it.
    member = tmp_path / "member"
    member.write_text(token_create(user=world.amy, tenant=world.alpha, name="cli").secret)
    assert run(["login", "--url", live_server.url, "--token-file", str(member)], env).returncode == 0
    refused = run(["nodes"], env)
    assert refused.returncode == 4 and refused.stderr.startswith("error: "), refused.stderr
    spend = json.loads(run(["spend", "--json"], env).stdout)
    assert spend["spend"]["total"] == 0 and spend["balance"]["available"] == 0 and spend["alerts"] == []
    prices = json.loads(run(["prices", "--json"], env).stdout)
    assert {p["gpu_type"] for p in prices} == {"H100", "A100"}
    assert "PROFILE" in run(["profiles"], env).stdout


def test_the_python_client_against_the_live_server(world, live_server):
    from gpumarket_client import ApiError, Client

    world.fund(world.alpha, 1000)
    world.nodes(world.h100, 1, size=8)
    secret = token_create(user=world.amy, tenant=world.alpha, name="nb").secret
    job_args: dict[str, Any] = {"name": "nb", "command": "python nb.py", "gpus": 2, "max_hours": "1"}
    with Client(live_server.url, secret) as client:
        assert client.tenant == "alpha"  # asked of the server: the token's team
        found = client.estimate(**job_args, bids={"H100": "5"})
        assert found.guidance[0].tier == "B" and found.starts[0].gpu_type == "H100"
        job = client.jobs.submit(**job_args, bids=[("H100", "5")], idempotency_key="nb-1")
        assert job.state == "pending" and job.bids[0].limit == 5_000_000
        assert client.jobs.submit(**job_args, bids={"H100": "5"}, idempotency_key="nb-1").id == job.id
        assert job.refresh().queue[0].position == 1 and job.logs() == ""
        with pytest.raises(ApiError) as refused:
            client.jobs.submit(**{**job_args, "gpus": 3}, bids={"H100": "5"}, idempotency_key="nb-1")
        assert (refused.value.status, refused.value.code) == (409, "idempotency_key_reused")
        with pytest.raises(ApiError) as bad:
            client.jobs.submit(**{**job_args, "max_hours": "0"}, bids={"H100": "5"})
        assert (bad.value.code, bad.value.field, bad.value.exit_code) == ("invalid", "max_hours", 3)
        assert job.cancel().state == "cancelled"
        assert job.wait(interval=0.1, timeout=5).state == "cancelled" and job.exit_code is None
        assert [j.id for j in client.jobs.list(state="cancelled")] == [job.id]
