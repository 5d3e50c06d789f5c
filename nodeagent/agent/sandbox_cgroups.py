"""CPU, memory and process limits per job through cgroups (docs/agent.md §The sandbox).

cgroup v2 where the node mounts it with controllers (memory.max, cpu.max, pids.max, memory.events), else the
v1 hierarchies the node has (memory.limit_in_bytes, cpu.cfs_quota_us, pids.max, memory.oom_control). Each job
gets a group `gpumarket/lease-N` under each hierarchy; the shim joins them before it starts the job, so the job
and everything it forks are counted from the first instruction. What cannot be set here is said, per limit,
in capabilities() (sent at registration): a limit never fails silently.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

PARENT = "gpumarket"
CPU_PERIOD_US = 100_000
CONTROLLERS = ("memory", "cpu", "pids")


@dataclass(frozen=True)
class Limits:
    cpus: float | None = None  # cores; None: not limited
    memory_bytes: int | None = None
    pids: int | None = None


@dataclass
class Cgroups:
    """The node's cgroup set-up as found at start. version: "v2", "v1" or "" (none usable)."""

    version: str = ""
    roots: dict[str, Path] = field(default_factory=dict)  # controller -> the parent group jobs go under
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why it cannot be limited

    @classmethod
    def detect(cls, mountinfo: Path = Path("/proc/self/mountinfo")) -> Cgroups:
        if os.geteuid() != 0:
            return cls("", {}, dict.fromkeys(CONTROLLERS, "the agent does not run as root"))
        v2: Path | None = None
        v1: dict[str, Path] = {}
        try:
            lines = mountinfo.read_text().splitlines()
        except OSError as exc:
            return cls("", {}, dict.fromkeys(CONTROLLERS, f"cannot read {mountinfo}: {exc.strerror}"))
        for line in lines:
            left, _, right = line.partition(" - ")
            fstype, _, options = (right.split() + ["", "", ""])[:3]
            mount_point = Path(left.split()[4])
            if fstype == "cgroup2" and (mount_point / "cgroup.controllers").exists():
                controllers = (mount_point / "cgroup.controllers").read_text().split()
                if set(CONTROLLERS) & set(controllers) and v2 is None:
                    v2 = mount_point
            elif fstype == "cgroup":
                for name in options.split(","):
                    if name in CONTROLLERS:
                        v1.setdefault(name, mount_point)
        if v2 is not None:
            return cls._v2(v2)
        if v1:
            return cls._v1(v1)
        return cls("", {}, dict.fromkeys(CONTROLLERS, "no cgroup hierarchy is mounted"))

    @classmethod
    def _v2(cls, mount: Path) -> Cgroups:
        found = cls("v2")
        parent = mount / PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            return cls("v2", {}, dict.fromkeys(CONTROLLERS, f"cannot create {parent}: {exc.strerror}"))
        for name in CONTROLLERS:
            # Enabled from the mount down to the parent, so each job's group has the controller's files.
            try:
                for group in (mount, parent):
                    if name not in (group / "cgroup.subtree_control").read_text().split():
                        (group / "cgroup.subtree_control").write_text(f"+{name}")
                found.roots[name] = parent
            except OSError as exc:
                found.missing[name] = f"cannot enable the {name} controller: {exc.strerror}"
        return found

    @classmethod
    def _v1(cls, mounts: dict[str, Path]) -> Cgroups:
        found = cls("v1")
        for name in CONTROLLERS:
            if name not in mounts:
                found.missing[name] = f"no cgroup v1 {name} hierarchy is mounted"
                continue
            parent = mounts[name] / PARENT
            try:
                parent.mkdir(exist_ok=True)
                found.roots[name] = parent
            except OSError as exc:
                found.missing[name] = f"cannot create {parent}: {exc.strerror}"
        return found

    def capabilities(self) -> dict[str, object]:
        """What the registration says: the version and, per limit, whether it is enforced or why not."""
        limits = {
            name: ("enforced" if name in self.roots else self.missing.get(name, "unknown"))
            for name in CONTROLLERS
        }
        return {"version": self.version or None, "limits": limits}

    # ------------------------------------------------------------------ per job
    def create(self, name: str, limits: Limits) -> list[str]:
        """The job's groups (one per hierarchy; one in all under v2) with its limits written; the shim joins
        them. A limit that cannot be written is an OSError: the bind is refused rather than run unlimited."""
        groups: dict[Path, None] = {}
        for controller, parent in self.roots.items():
            group = parent / name
            group.mkdir(exist_ok=True)
            groups[group] = None
            self._write(controller, group, limits)
        return [str(g) for g in groups]

    def _write(self, controller: str, group: Path, limits: Limits) -> None:
        if controller == "memory" and limits.memory_bytes is not None:
            if self.version == "v2":
                (group / "memory.max").write_text(str(limits.memory_bytes))
                if (group / "memory.swap.max").exists():  # over its memory the job is killed, not swapped
                    (group / "memory.swap.max").write_text("0")
            else:
                (group / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                if (group / "memory.memsw.limit_in_bytes").exists():
                    with contextlib.suppress(OSError):  # swap accounting may be off: memory alone then
                        (group / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
        elif controller == "cpu" and limits.cpus is not None:
            quota = max(1000, round(limits.cpus * CPU_PERIOD_US))
            if self.version == "v2":
                (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
        elif controller == "pids" and limits.pids is not None:
            (group / "pids.max").write_text(str(limits.pids))


def oom_killed(groups: list[str]) -> bool:
    """Whether the kernel's OOM killer killed a process of the job's memory group (v2 memory.events,
    v1 memory.oom_control: both count `oom_kill`)."""
    for group in map(Path, groups):
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (group / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                    return True
    return False


def remove(groups: list[str]) -> bool:
    """Remove the job's groups once empty; False while a process is still in one (tried again later)."""
    done = True
    for group in groups:
        try:
            os.rmdir(group)
        except FileNotFoundError:
            pass
        except OSError:
            done = False
    return done
