"""What /proc says about a process: its group and session, CPU time, memory and start time.

The start time (clock ticks after boot) tells a live process of ours from a later one that got the same pid.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Stat:
    pid: int
    state: str
    pgrp: int
    session: int
    cpu_ticks: int  # user + system, its own and that of the children it has waited for
    start_ticks: int
    rss_bytes: int

    @property
    def alive(self) -> bool:
        return self.state not in "ZXx"  # a zombie has exited, it only waits to be reaped


def stat(pid: int) -> Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return Stat(
        pid=pid,
        state=fields[0].decode(),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        cpu_ticks=int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14]),
        start_ticks=int(fields[19]),
        rss_bytes=int(fields[21]) * PAGE_BYTES,
    )


def is_same_process(pid: int, start_ticks: int) -> bool:
    """pid is alive and is the very process that was started at start_ticks (not a reuse of its pid)."""
    s = stat(pid)
    return s is not None and s.alive and s.start_ticks == start_ticks


def sessions(wanted: set[int]) -> dict[int, list[Stat]]:
    """The live processes of each wanted session. Jobs run in sessions of their own, so a session holds the
    job and everything it started, even processes that moved to another process group."""
    found: dict[int, list[Stat]] = {sid: [] for sid in wanted}
    if not wanted:
        return found
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s is not None and s.session in found and s.alive:
                found[s.session].append(s)
    return found
