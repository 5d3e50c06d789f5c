"""The job's supervisor: `python -I shim.py EXIT_JSON [--as UID:GID] -- ARGV...` (standard library only).

The agent starts it as the leader of a new session and process group, with the job's environment, working
directory and log file. It runs ARGV directly (no shell), as UID:GID with no other groups when given (the
shim itself stays the agent's user, so the job cannot touch its exit record), waits for it and writes EXIT_JSON atomically
({"exit_code", "signal", "ended_at"}), so the job's outcome is known even when the agent was down when the job
ended. It ignores SIGTERM, SIGINT and SIGHUP itself (the job gets them through the group: a stop signals the
whole group), then kills whatever the job left behind in its group.
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


def main(argv: list[str]) -> int:
    run_as: dict[str, object] = {}
    if len(argv) >= 4 and argv[2] == "--as":
        uid, gid = (int(x) for x in argv[3].split(":"))
        run_as = {"user": uid, "group": gid, "extra_groups": []}
        argv = argv[:2] + argv[4:]
    if len(argv) < 4 or argv[2] != "--":
        print("usage: shim.py EXIT_JSON [--as UID:GID] -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    exit_path, command = argv[1], argv[3:]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _ignore)
    try:
        child = subprocess.Popen(command, **run_as)  # type: ignore[call-overload]  # Popen's overloads cannot match a **kwargs dict of mixed types
    except OSError as exc:  # not found, not executable: the shell's codes
        print(f"gpumarket-agent: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        _write_exit(exit_path, {"exit_code": code, "signal": None, "ended_at": time.time()})
        return code
    status = child.wait()
    ended = {"exit_code": status, "signal": None} if status >= 0 else {"exit_code": None, "signal": -status}
    _write_exit(exit_path, {**ended, "ended_at": time.time()})
    sys.stdout.flush()
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)  # what the job left running in its group goes with it (and this shim)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
