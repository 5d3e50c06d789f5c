"""The job's supervisor: `python -I shim.py EXIT_JSON [--as UID:GID] [--cgroup DIR]... [--sandboxed] -- ARGV...`
(standard library only).

The agent starts it as the leader of a new session and process group, with the job's environment, working
directory and log file. It runs ARGV directly (no shell), as UID:GID with no other groups when given (the
shim itself stays the agent's user, so the job cannot touch its exit record), waits for it and writes EXIT_JSON atomically
({"exit_code", "signal", "ended_at"}), so the job's outcome is known even when the agent was down when the job
ended. It ignores SIGTERM, SIGINT and SIGHUP itself (the job gets them through the group: a stop signals the
whole group), then kills whatever the job left behind in its group. With --cgroup the job joins those cgroups
before exec; --sandboxed: ARGV is the sandbox (sandbox.py), whose exit code 128+N means the job died of signal N.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: an ignored signal would stay ignored in the job across exec."""


def _write_exit(path: str, outcome: dict[str, object]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(outcome, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _options(argv: list[str]) -> tuple[str, dict[str, object], list[str], bool, list[str]] | None:
    """EXIT_JSON, Popen's user arguments, the cgroups to join, sandboxed, COMMAND; None on bad usage."""
    if len(argv) < 2:
        return None
    exit_path, rest = argv[1], argv[2:]
    run_as: dict[str, object] = {}
    groups: list[str] = []
    sandboxed = False
    while rest and rest[0] != "--":
        if rest[0] == "--as" and len(rest) > 1:
            uid, gid = (int(x) for x in rest[1].split(":"))
            run_as = {"user": uid, "group": gid, "extra_groups": []}
            rest = rest[2:]
        elif rest[0] == "--cgroup" and len(rest) > 1:
            groups.append(rest[1])
            rest = rest[2:]
        elif rest[0] == "--sandboxed":
            sandboxed, rest = True, rest[1:]
        else:
            return None
    if len(rest) < 2:
        return None
    return exit_path, run_as, groups, sandboxed, rest[1:]


def _prepare(groups: list[str], sandboxed: bool) -> None:
    """In the child before exec: join the job's cgroups (so it is limited from its first instruction), and
    for the sandbox ignore the stop signals, so that bwrap's monitor lives through the job's grace period
    (the job gets them back inside through `env --default-signal`)."""
    pid = str(os.getpid())
    for group in groups:
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(pid)
    if sandboxed:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    parsed = _options(argv)
    if parsed is None:
        print(
            "usage: shim.py EXIT_JSON [--as UID:GID] [--cgroup DIR]... [--sandboxed] -- COMMAND [ARG...]",
            file=sys.stderr,
        )
        return 2
    exit_path, run_as, groups, sandboxed, command = parsed
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    try:
        child = subprocess.Popen(command, preexec_fn=lambda: _prepare(groups, sandboxed), **run_as)  # type: ignore[call-overload]  # Popen's overloads cannot match a **kwargs dict of mixed types
    except (OSError, subprocess.SubprocessError) as exc:  # not found, not executable: the shell's codes
        print(
            f"gpumarket-agent: cannot run {command[0]!r}: {getattr(exc, 'strerror', None) or exc}",
            file=sys.stderr,
            flush=True,
        )
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        _write_exit(exit_path, {"exit_code": code, "signal": None, "ended_at": time.time()})
        return code
    status = child.wait()
    if sandboxed and 128 < status <= 128 + 64:  # bwrap says "killed by signal N" as 128+N
        status = 128 - status
    ended = {"exit_code": status, "signal": None} if status >= 0 else {"exit_code": None, "signal": -status}
    _write_exit(exit_path, {**ended, "ended_at": time.time()})
    sys.stdout.flush()
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)  # what the job left running in its group goes with it (and this shim)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
