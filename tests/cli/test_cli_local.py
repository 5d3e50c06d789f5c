"""The command line's own parts that need no server: profiles on disk, job files, help, completion, and the
errors it gives before any request (a real subprocess each, as a user runs it)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpumarket_client import profiles
from gpumarket_client.cli import jobfile
from gpumarket_client.errors import ClientError, NotSignedIn
from gpumarket_client.models import new_output

ROOT = Path(__file__).resolve().parents[2]


def gpumarket(*args: str, config: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(config), "HOME": str(config)}
    return subprocess.run(
        [sys.executable, "-m", "gpumarket_client", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
    )


def test_profiles_are_private_named_and_one_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("GPUMARKET_URL", "GPUMARKET_TOKEN", "GPUMARKET_TENANT", "GPUMARKET_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NotSignedIn, match="run `gpumarket login`"):
        profiles.load()
    profiles.save(profiles.Profile("lab", "http://a", "t1", "vision"), make_default=True)
    profiles.save(profiles.Profile("cloud", "http://b", "t2", "nlp"), make_default=False)
    path = tmp_path / "gpumarket" / "profiles.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert profiles.load().name == "lab" and profiles.load("cloud").tenant == "nlp"
    monkeypatch.setenv("GPUMARKET_PROFILE", "cloud")
    assert profiles.load().url == "http://b"
    assert profiles.remove("cloud") and not profiles.remove("cloud")
    path.write_text("{not json")
    with pytest.raises(ClientError, match="cannot be read"):
        profiles.load()


def test_job_files_in_toml_and_yaml_and_keys_the_api_does_not_take(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text(
        'name = "r"\ncommand = "python t.py"\ngpus = 2\nmax_hours = 3\n[bids]\nH100 = "4.5"\nA100 = 2\n'
    )
    assert jobfile.read(toml)["bids"] == [("H100", "4.5"), ("A100", "2")]
    yaml = tmp_path / "job.yaml"
    yaml.write_text("name: r\ncommand: python t.py\nbids:\n  - {gpu_type: H100, limit: '4.5'}\n")
    merged = jobfile.merge(yaml, {"gpus": 4, "bids": []})
    assert (merged["gpus"], merged["max_hours"], merged["bids"]) == (4, "1", [("H100", "4.5")])
    for key, text in (("cpus", "asked per GPU: cpus_per_gpu"), ("max_hour", "not a job field")):
        toml.write_text(f'name = "r"\n{key} = 8\n')
        with pytest.raises(jobfile.JobFileError, match=f"{key}: .*{text}"):
            jobfile.read(toml)
    toml.write_text('name = "r"\ncpus_per_gpu = "4"\nmemory_gb_per_gpu = 32\n')
    assert jobfile.read(toml) == {"name": "r", "cpus_per_gpu": "4", "memory_gb_per_gpu": 32}
    toml.write_text("name = \n")
    with pytest.raises(jobfile.JobFileError, match="not valid TOML"):
        jobfile.read(toml)
    with pytest.raises(jobfile.JobFileError, match="bids: required"):
        jobfile.merge(None, {"name": "r", "command": "c"})


def test_help_loads_neither_the_http_stack_nor_the_tables() -> None:
    code = (
        "import sys\nfrom gpumarket_client.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('httpx', 'rich', 'yaml', 'gpumarket_client.client') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


def test_usage_errors_and_not_signed_in_are_one_line_with_their_exit_codes(tmp_path: Path) -> None:
    assert gpumarket("--help", config=tmp_path).returncode == 0
    none = gpumarket("jobs", config=tmp_path)
    assert none.returncode == 4 and none.stderr.startswith("error: profile 'default': not signed in")
    as_json = json.loads(gpumarket("jobs", "--json", config=tmp_path).stderr)
    assert as_json["error"] == "NotSignedIn"
    usage = gpumarket("show", "abc", config=tmp_path)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    missing = gpumarket("submit", "--name", "x", "--command", "c", config=tmp_path)
    assert missing.returncode == 2 and "bids: required" in missing.stderr
    empty = gpumarket("login", "--url", "http://127.0.0.1:9", config=tmp_path, stdin="")
    assert empty.returncode == 2 and "the token is empty" in empty.stderr
    unset = gpumarket("login", "--device", "--url", "http://127.0.0.1:9", config=tmp_path)
    assert unset.returncode == 3 and "give --issuer and --client-id" in unset.stderr
    gone = gpumarket(
        "login", "--device", "--issuer", "http://127.0.0.1:9", "--client-id", "cli", config=tmp_path
    )
    assert gone.returncode == 6 and gone.stderr.startswith("error: device sign-in: http: http://127.0.0.1:9")


def test_completion_scripts_for_bash_and_zsh(tmp_path: Path) -> None:
    bash = gpumarket("completion", "bash", config=tmp_path)
    assert bash.returncode == 0 and "_GPUMARKET_COMPLETE=bash_complete" in bash.stdout
    zsh = gpumarket("completion", "zsh", config=tmp_path)
    assert zsh.returncode == 0 and "#compdef gpumarket" in zsh.stdout
    # What the scripts ask: the words so far, answered with the commands that fit.
    env = {
        "PATH": "/usr/bin:/bin",
        "_GPUMARKET_COMPLETE": "bash_complete",
        "COMP_WORDS": "gpumarket su",
        "COMP_CWORD": "1",
    }
    asked = subprocess.run(
        [sys.executable, "-m", "gpumarket_client"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert asked.stdout.split() == ["plain,submit"]
    env |= {"_GPUMARKET_COMPLETE": "zsh_complete", "COMP_WORDS": "gpumarket policy ", "COMP_CWORD": "2"}
    asked = subprocess.run(
        [sys.executable, "-m", "gpumarket_client"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert {"diff", "revert", "versions"} <= set(asked.stdout.split())


def test_following_a_log_prints_only_what_is_new() -> None:
    assert new_output("", "a\nb\n") == "a\nb\n"
    assert new_output("a\nb\n", "a\nb\nc\n") == "c\n"
    assert new_output("a\nb\nc\n", "b\nc\nd\n") == "d\n"  # the tail moved on: 64 KiB kept
    assert new_output("a\nb\n", "a\nb\n") == ""


def test_the_per_gpu_cpu_and_memory_reach_the_submit_body() -> None:
    """The job's cgroup share per GPU (docs/jobs.md) is sent as the API's decimal strings; left out, not sent."""
    from gpumarket_client.client import job_body

    body = job_body(name="r", command="c", gpus=2, max_hours=1, bids={"H100": 3}, cpus_per_gpu=4)
    assert body["cpus_per_gpu"] == "4" and "memory_gb_per_gpu" not in body
