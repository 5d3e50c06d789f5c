"""Compiled loops: numba's ``njit`` with the options every kernel of the allocator uses.

Why compiled loops: the rules of a round are sequential (first-fit into a guarantee, the budget's prefix fit,
best-fit placement). In numpy each such rule costs a dozen passes over the book (sorts to group by tenant,
cumsums, gathers); a compiled loop costs one, and reads like the rule it implements.

``cache=True`` keeps the machine code in ``__pycache__`` beside this package, so only the first process after a
change compiles (a few seconds); ``nogil=True`` lets the result builder's second thread run beside a kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F) -> F:
    """``fn`` compiled to machine code on first call (numba nopython mode), typed as ``fn`` for mypy."""
    return cast(F, numba.njit(cache=True, nogil=True)(fn))
