"""Each job confined to what it won (docs/agent.md §The sandbox).

A job runs under bubblewrap (`bwrap`, Debian's `bubblewrap`), started by the agent as root, so no user
namespace is needed and no daemon runs:

- /dev is a fresh one (null, zero, random, tty, pts) plus only the job's own GPUs' device nodes and the
  control nodes CUDA needs (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-caps), as libnvidia-container
  binds them; another GPU's node does not exist in it, whatever CUDA_VISIBLE_DEVICES says.
- a PID namespace and a fresh /proc: the job sees only its own processes, so it cannot name (signal, ptrace)
  another job's or the agent's. When the job's first process ends, the namespace ends and the kernel kills
  what it left behind.
- the system read-only (/ bound read-only); a private /tmp and /dev/shm (tmpfs, gone with the sandbox), in
  which only the software the job is started with stays visible read-only where it lives there (a checkout or
  virtual environment under /tmp, as a CI clone is: `software_roots`); the agent's state directory (credential, other jobs' logs and work directories) and the checkpoint root are
  replaced by empty ones, in which only the job's own work and checkpoint directories are bound writable.
- inside, `setpriv` drops to the job's user with no groups, no capabilities (bounding set emptied) and
  no_new_privs, so a set-uid binary cannot give root back; without a job user it stays root with every
  capability dropped by bwrap.

The shim (outside, the agent's user) starts bwrap with SIGTERM, SIGINT and SIGHUP ignored, so the stop the
agent sends to the job's process group does not kill bwrap's monitor before the job had its grace period;
`env --default-signal` gives the job back their default handling. bwrap reports a job killed by signal N as
exit 128+N: the shim turns that back into the signal (`--sandboxed`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps")
STOP_SIGNALS = "HUP,INT,TERM"
MODES = ("off", "auto", "on")


class SandboxUnavailable(Exception):
    """The node cannot run jobs in the sandbox; the message says why (sent at registration)."""


@dataclass(frozen=True)
class Sandbox:
    device_root: Path = Path(
        "/dev"
    )  # where the GPUs' device nodes are (tests: a directory of mknod'ed nodes)
    hidden: tuple[str, ...] = ()  # directories a job must not see: the agent's state, the checkpoint root
    bwrap: str = "bwrap"
    tools: dict[str, str] = field(default_factory=dict)  # "bwrap", "setpriv", "env" -> absolute path

    @classmethod
    def probe(cls, *, device_root: Path, hidden: Sequence[str]) -> Sandbox:
        """The sandbox if this node can run one (root, bwrap and setpriv found, the kernel lets bwrap make
        its namespaces and mounts); SandboxUnavailable with the reason otherwise."""
        if os.geteuid() != 0:
            raise SandboxUnavailable("the agent does not run as root")
        tools = {}
        for tool, package in (("bwrap", "bubblewrap"), ("setpriv", "util-linux"), ("env", "coreutils")):
            # GPUMARKET_BWRAP: a bwrap elsewhere (and the tests' stand-in for a kernel that refuses it).
            wanted = os.environ.get("GPUMARKET_BWRAP", tool) if tool == "bwrap" else tool
            found = shutil.which(wanted, path="/usr/bin:/bin:/usr/sbin:/sbin")
            if found is None:
                raise SandboxUnavailable(f"{tool} not found (Debian package {package})")
            tools[tool] = found
        if device_root.resolve() != Path("/dev"):  # the nodes must not be reachable there either
            hidden = [*hidden, str(device_root.resolve())]
        sandbox = cls(device_root, tuple(hidden), tools["bwrap"], tools)
        trial = [*sandbox._base(), "--", tools["env"], "true"]
        try:
            done = subprocess.run(trial, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"bwrap cannot start: {exc}") from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxUnavailable(
                f"the kernel refused the sandbox: {said[-1] if said else done.returncode}"
            )
        return sandbox

    def _base(self) -> list[str]:
        return [
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--perms", "1777", "--tmpfs", "/dev/shm",
            "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp",
        ]  # fmt: skip

    def devices(self, minors: Sequence[int]) -> list[str]:
        """The device nodes a job on these GPUs gets, as names under the device root: nvidiaN for its GPUs'
        minor numbers and the control nodes the node has."""
        names = [f"nvidia{m}" for m in sorted(set(minors))] + list(CONTROL_NODES)
        return [n for n in names if (self.device_root / n).exists()]

    def command(
        self,
        argv: Sequence[str],
        *,
        minors: Sequence[int],
        writable: Sequence[str],
        cwd: str,
        run_as: Sequence[int] | None,
    ) -> list[str]:
        """The argv that runs argv in the sandbox (the shim runs it, inside the job's cgroups)."""
        cmd = self._base()
        roots = [
            Path("/tmp"),
            Path("/dev/shm"),
        ]  # the tmpfs mounts: what bwrap creates in them is root's, 0700
        made: set[Path] = set()

        def traversable(path: Path) -> list[str]:
            """--dir for each directory between a tmpfs root and path: created traversable (0755), no more."""
            out: list[str] = []
            for parent in reversed(path.parents):
                if (
                    parent not in made
                    and parent not in roots
                    and any(parent.is_relative_to(r) for r in roots)
                ):
                    out += ["--perms", "0755", "--dir", str(parent)]
                    made.add(parent)
            return out

        for soft in software_roots(roots[:2]):  # before the hidden ones: they stay hidden inside it
            cmd += [*traversable(soft), "--ro-bind", str(soft), str(soft)]
        for hidden in sorted(map(Path, self.hidden), key=lambda p: len(p.parts)):
            cmd += [*traversable(hidden), "--perms", "0755", "--tmpfs", str(hidden)]
            roots.append(hidden)
        for directory in writable:
            cmd += [*traversable(Path(directory)), "--bind", directory, directory]
        for name in self.devices(minors):
            cmd += ["--dev-bind", str(self.device_root / name), f"/dev/{name}"]
        cmd += ["--chdir", cwd]
        if run_as:
            uid, gid = run_as[0], run_as[1]
            cmd += ["--", self.tools["setpriv"], f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
            cmd += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            cmd += ["--cap-drop", "ALL"]
        return [*cmd, "--", self.tools["env"], f"--default-signal={STOP_SIGNALS}", *argv]


def software_roots(tmpfs: Sequence[Path]) -> list[Path]:
    """The agent's Python (its prefix and base prefix), its own code and its PATH's directories, where they lie
    under one of the sandbox's private tmpfs mounts: a job starts with the same interpreter and PATH, and under
    a tmpfs they would vanish (bound back read-only; elsewhere / already shows them read-only). Outermost only."""
    here = Path(__file__).resolve().parents[2]  # the checkout or site-packages holding nodeagent
    found = [Path(sys.prefix), Path(sys.base_prefix), here]
    found += [Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    under = sorted(
        {p.resolve() for p in found if p.is_absolute() and any(p.resolve().is_relative_to(t) for t in tmpfs)},
        key=lambda p: len(p.parts),
    )
    out: list[Path] = []
    for p in under:
        if p.exists() and p not in tmpfs and not any(p.is_relative_to(o) for o in out):
            out.append(p)
    return out
