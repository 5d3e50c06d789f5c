"""Work thrown away by preemptions under the checkpoint model (scenario `checkpoint_min`, docs/simulator.md).

Kept apart from metrics.py's fairness figures: these read only the run segments' `run_lost_gpu_s`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from allocator.sim.series import IntArray
from allocator.sim.state import SimState


def _segments(state: SimState) -> tuple[IntArray, IntArray, IntArray]:
    """Per run segment: its tenant, its GPU-seconds, and the GPU-seconds of progress it threw away."""
    h = state.history
    job = np.array(h.run_job, dtype=np.int64)
    seconds = np.array(h.run_end, dtype=np.int64) - np.array(h.run_start, dtype=np.int64)
    delivered: IntArray = (seconds * state.jobs.gpus[job]).astype(np.int64)
    tenant: IntArray = state.jobs.tenant[job].astype(np.int64)
    return tenant, delivered, np.array(h.run_lost_gpu_s, dtype=np.int64)


def lost_figures(state: SimState) -> dict[str, Any]:
    """`checkpoint_min`, `lost_gpu_hours` (GPU-hours of progress preemptions threw away, to be redone) and
    `lost_share` (that over the GPU-hours of every run segment, restarts and lost work included)."""
    _, delivered, lost = _segments(state)
    total = int(delivered.sum())
    return {
        "checkpoint_min": state.scenario.checkpoint_min,
        "lost_gpu_hours": round(int(lost.sum()) / 3600, 3),
        "lost_share": round(int(lost.sum()) / total, 4) if total else None,
    }


def lost_gpu_hours_by_tenant(state: SimState) -> list[float]:
    """`lost_gpu_hours` of each tenant, in the scenario's order."""
    tenant, _, lost = _segments(state)
    per = np.bincount(tenant, weights=lost, minlength=len(state.scenario.tenants))
    return [round(float(x) / 3600, 3) for x in per]


def placement_figures(state: SimState) -> dict[str, Any]:
    """What reservations, backfill and moves cost and gave (History.placement): `moves` (leases moved to make
    room for a gang), `moved_lost_gpu_hours` (work those moves threw away, within `lost_gpu_hours`),
    `reserved_idle_gpu_hours` (GPUs held idle on nodes reserved for a gang) and `backfilled_gpu_hours` (GPU-hours
    run by jobs backfilled on such nodes)."""
    p = state.history.placement
    return {
        "moves": p["moves"],
        "moved_lost_gpu_hours": round(p["moved_lost_gpu_s"] / 3600, 3),
        "reserved_idle_gpu_hours": round(p["reserved_idle_gpu_s"] / 3600, 1),
        "backfilled_gpu_hours": round(p["backfilled_gpu_s"] / 3600, 1),
    }
