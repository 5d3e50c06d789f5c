"""A job's log, capped (docs/agent.md §The sandbox): past its cap the oldest part is dropped and the log says so.

The job writes its log itself (the file is its stdout and stderr, opened for appending), so the agent cuts
the front off in place: fallocate's COLLAPSE_RANGE (ext4, XFS) removes whole blocks from the start while the
job goes on appending, with nothing lost. Where the file system cannot, the last half is copied to the front
and the file truncated; output the job writes during that copy can be lost (said in docs/agent.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

FALLOC_FL_COLLAPSE_RANGE = 0x08
BLOCK = 4096
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def notice(dropped: int, cap: int) -> bytes:
    return f"\n[gpumarket-agent] this log is capped at {cap} bytes: its oldest {dropped} bytes were dropped\n".encode()


def cap(path: str, max_bytes: int) -> int:
    """Keep the log at most max_bytes (checked at each agent step): when over, drop the oldest bytes down to
    half the cap and append a line saying how many. Returns the bytes dropped (0: under the cap)."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return 0
    if size <= max_bytes:
        return 0
    drop = (size - max_bytes // 2) // BLOCK * BLOCK
    if drop <= 0:
        return 0
    fd = os.open(path, os.O_RDWR)
    try:
        if _libc.fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, drop) != 0:
            keep = os.pread(fd, size, drop)  # the file system cannot collapse: copy the rest to the front
            os.pwrite(fd, keep, 0)
            os.ftruncate(fd, len(keep))
    finally:
        os.close(fd)
    with open(path, "ab") as log:
        log.write(notice(drop, max_bytes))
    return drop
