"""Small files written so that a crash leaves either the old content or the new, never a torn file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Write to a temporary name, then rename over path. durable: fsync the file and its directory, so the
    new content survives a power loss too (the usage spool, job outcomes); counters rewritten every interval
    skip it (a crash then loses at most one interval of counters, which the next sample recomputes)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it (the credential is 0600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, value: Any, *, mode: int = 0o644, durable: bool = True) -> None:
    write_atomic(path, json.dumps(value, separators=(",", ":")).encode(), mode=mode, durable=durable)


def read_json(path: Path) -> Any:
    """The decoded file, or None when it does not exist."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
