"""Compiled loops: numba's ``njit`` with the options every kernel of the allocator uses.

Why compiled loops: the rules of a round are sequential (first-fit into a guarantee, the budget's prefix fit,
best-fit placement). In numpy each such rule costs a dozen passes over the book (sorts to group by tenant,
cumsums, gathers); a compiled loop costs one, and reads like the rule it implements.

``cache=True`` keeps the machine code in ``__pycache__`` beside this package, so only the first process after a
change compiles (a few seconds); ``nogil=True`` lets the result builder's second thread run beside a kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F) -> F:
    """``fn`` compiled to machine code on first call (numba nopython mode), typed as ``fn`` for mypy."""
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


def forget_when_changed(module_file: str, *callees: str) -> None:
    """Drop the cached machine code of the kernels in ``module_file`` when a source file whose kernels they
    call (``callees``) changed since it was cached.

    Why: numba checks a cached kernel against its own source file only, so a kernel that calls kernels of
    another file would go on running their old code after an edit there. A stamp beside the cache holds a
    hash of the callees' sources; a different hash drops the module's cache, and the next call compiles."""
    source = Path(module_file)
    cache = source.parent / "__pycache__"
    digest = hashlib.sha256(b"".join(Path(f).read_bytes() for f in callees)).hexdigest()
    stamp = cache / f"{source.stem}.callees"
    with contextlib.suppress(OSError):  # no stamp yet: whatever is cached may predate it, so drop it
        if stamp.read_text() == digest:
            return
    # a read-only tree fails here: numba caches elsewhere then (its user-wide directory), where no one edits
    with contextlib.suppress(OSError):
        for old in cache.glob(f"{source.stem}.*.nb[ic]"):
            old.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_heap_kept = False


def keep_freed_memory() -> None:
    """Once per process: ask glibc's malloc to serve blocks up to 256 MiB from its heap and to keep up to 1 GiB
    freed there, instead of mapping each large block afresh and handing it back when freed.

    Why: a round allocates and frees hundreds of megabytes in arrays of a few MiB. Left to its defaults, malloc
    returns much of it to the kernel after each round and the next round faults it back in, 4 KiB at a time:
    about 5,000 page faults, 9 ms of a 78 ms clearing of 10^6 bids on the benchmark machine. The cost is that
    a process keeps the memory of its largest round. Elsewhere than glibc this does nothing."""
    global _heap_kept
    if _heap_kept:
        return
    _heap_kept = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows)
        return
    mallopt(_M_MMAP_THRESHOLD, 256 << 20)
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)
