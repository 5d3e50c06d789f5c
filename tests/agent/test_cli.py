"""`gpumarket-agent` at the command line: help, and one clear line for whatever stops it from starting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.agent.conftest import REPO
from tests.agent.fakeserver import wait_for

BOOTSTRAP_ENV = "GPUMARKET_BOOTSTRAP_TOKEN"


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMARKET_")}
    full_env |= {"PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_help_names_every_flag_and_its_environment_variable():
    done = run("--help")
    assert done.returncode == 0
    for flag, variable in [
        ("--server", "GPUMARKET_SERVER"),
        ("--bootstrap-token-file", "GPUMARKET_BOOTSTRAP_TOKEN"),
        ("--state-dir", "GPUMARKET_STATE_DIR"),
        ("--backend", "GPUMARKET_BACKEND"),
        ("--sim-gpus", "GPUMARKET_SIM_GPUS"),
        ("--sim-model", "GPUMARKET_SIM_MODEL"),
        ("--interval", "GPUMARKET_INTERVAL"),
        ("--checkpoint-root", "GPUMARKET_CHECKPOINT_ROOT"),
        ("--name", "GPUMARKET_NODE_NAME"),
    ]:
        assert flag in done.stdout and variable in done.stdout


def test_a_bad_flag_or_value_is_one_line_and_exit_2(tmp_path):
    for args, env, says in [
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
        (["--backend", "cuda"], {}, "invalid choice: 'cuda'"),
        (["--interval", "0"], {}, "'0' must be between 0.05 and 3600 seconds"),
        ([], {"GPUMARKET_SIM_GPUS": "many"}, "'many' must be a whole number from 1 to 64"),
        (["--server", "ftp://x"], {}, "must start with http:// or https://"),
    ]:
        done = run(*args, "--state-dir", str(tmp_path), env=env)
        assert done.returncode == 2, args
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("gpumarket-agent: error: ")
        assert says in done.stderr


def test_an_unreachable_server_at_the_first_start_is_one_line_and_exit_1(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    done = run(
        "--server", url, "--backend", "sim", "--state-dir", str(tmp_path), env={BOOTSTRAP_ENV: "gpb_x"}
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        f"gpumarket-agent: error: cannot reach the server at {url}: POST register: "
    )


def test_no_credential_and_no_bootstrap_token_is_one_line_and_exit_1(tmp_path):
    done = run("--backend", "sim", "--state-dir", str(tmp_path))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "no node credential" in done.stderr and "GPUMARKET_BOOTSTRAP_TOKEN" in done.stderr


def test_nvml_without_a_driver_says_to_use_the_simulation(tmp_path, monkeypatch, capsys):
    """In process, with nvmlInit failing as it does without a driver (true on any machine, GPU or not)."""
    import pynvml

    from nodeagent.agent.__main__ import main

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    monkeypatch.setenv(BOOTSTRAP_ENV, "gpb_x")
    assert main(["--backend", "nvml", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVML is not available" in err and "--backend sim" in err


def test_a_second_agent_on_the_same_state_directory_is_refused(server, agent):
    agent.start()
    wait_for(lambda: server.heartbeats, what="the first agent")
    done = run("--backend", "sim", "--server", server.url, "--state-dir", str(agent.state_dir))
    assert done.returncode == 1 and "another agent is running on" in done.stderr
