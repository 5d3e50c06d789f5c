"""Proposals for the what-if tests: today's policy with some changes."""

from __future__ import annotations

import copy
from typing import Any

from whatif.policy import today_policy


def proposal(**changes: Any) -> dict[str, Any]:
    """Today's policy; `changes` maps a dotted path ("tenants.alpha.weight") to its new value."""
    policy = copy.deepcopy(today_policy())
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = policy
        for key in parents:
            node = node[key]
        node[leaf] = value
    return policy
