"""Noticing a running job's checkpoints (docs/agent.md §Checkpoints).

A job says it saved its work in either of two ways, and the agent takes the later of the two:

- a line in its log that starts with the marker `GPUMARKET_CHECKPOINT` (anything after it, a step or a path,
  is the job's own note). The log carries no times, so the checkpoint's time is the log file's modification
  time when the agent reads the line: at most one sample interval late.
- a regular file written in its checkpoint directory: the newest file's modification time. Names ending in
  `.tmp` or `.partial` are left out (a checkpoint still being written is not one yet).

Only times from the lease's own start are counted: the checkpoint directory is kept across a job's leases, and a
file from the one before says nothing about this one. Never later than now, so a clock-skewed file server
cannot push the checkpoint into the future.
"""

from __future__ import annotations

import os

from nodeagent.agent.records import Job

MARKER = b"GPUMARKET_CHECKPOINT"
# Each look reads at most this much new log: a job that writes faster has its older lines skipped (a marker
# among them is superseded by the log's time anyway, which is what the checkpoint is dated by).
READ_MAX = 1024 * 1024
# The checkpoint directory is walked this deep and this far, so a job cannot make a sample slow.
SCAN_DEPTH = 3
SCAN_ENTRIES = 10_000
PARTIAL_SUFFIXES = (".tmp", ".partial")


def observe(job: Job, now: float) -> float:
    """Look at the job's log and checkpoint directory; raise job.checkpoint_at to the newest checkpoint seen
    (never past `now`, never before the job's start) and return it (0.0: none yet)."""
    found = max(_log_marker(job), _newest_file(job.checkpoint_dir))
    if found >= job.started_at:
        job.checkpoint_at = max(job.checkpoint_at, min(found, now))
    return job.checkpoint_at


def _log_marker(job: Job) -> float:
    """The log's modification time when the complete lines written since the last look hold a marker line,
    else 0. job.log_offset moves past the complete lines read (a half-written last line is read again)."""
    try:
        with open(job.log_path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size < job.log_offset:  # truncated or replaced: read it again from the start
                job.log_offset = 0
            start = max(job.log_offset, st.st_size - READ_MAX)
            f.seek(start)
            chunk = f.read(st.st_size - start)
    except OSError:
        return 0.0
    skipped = start > job.log_offset
    end = chunk.rfind(b"\n")
    if end < 0:  # no complete line yet; a line longer than READ_MAX is passed over
        job.log_offset = start + len(chunk) if len(chunk) >= READ_MAX else job.log_offset
        return 0.0
    job.log_offset = start + end + 1
    lines = chunk[: end + 1].split(b"\n")
    if skipped:
        lines = lines[1:]  # the skip landed mid-line: its first piece is the end of a line not read
    marked = any(line.lstrip().startswith(MARKER) for line in lines)
    return st.st_mtime if marked else 0.0


def _newest_file(root: str) -> float:
    """The newest modification time of a regular file under `root` (SCAN_DEPTH levels, SCAN_ENTRIES
    entries at most), 0.0 when there is none."""
    newest, seen = 0.0, 0
    stack = [(root, 0)]
    while stack:
        path, depth = stack.pop()
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    seen += 1
                    if seen > SCAN_ENTRIES:
                        return newest
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < SCAN_DEPTH:
                            stack.append((entry.path, depth + 1))
                    elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(PARTIAL_SUFFIXES):
                        newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
        except OSError:
            continue
    return newest
