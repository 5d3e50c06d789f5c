"""The four plots of a comparison, as small PNGs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from allocator.sim.metrics import trace_of  # noqa: E402
from allocator.sim.series import FloatArray, Steps  # noqa: E402
from allocator.sim.state import SimState  # noqa: E402

DPI = 80
BINS = 400  # time bins across a run: fine enough to see the load, coarse enough to keep files small


def _edges(states: dict[str, SimState]) -> FloatArray:
    ends = [trace_of(s).ticks[-1] for s in states.values()]
    any_state = next(iter(states.values()))
    start = float(any_state.jobs.submit_s[0]) if len(any_state.jobs) else 0.0
    width = max(float(any_state.scenario.round_s), (max(ends) - start) / BINS)
    return np.arange(start, max(ends) + width, width)


def _mean_level(steps: Steps, edges: FloatArray) -> FloatArray:
    widths: FloatArray = edges[1:] - edges[:-1]
    return steps.integral(edges) / widths


def _days(edges: FloatArray) -> FloatArray:
    shifted: FloatArray = edges[:-1] - float(edges[0])
    return shifted / 86400


def plot_utilization(out: Path, states: dict[str, SimState]) -> Path:
    edges = _edges(states)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for name, state in states.items():
        tr = trace_of(state)
        jobs = state.jobs
        alloc = Steps(tr.run_start, tr.run_end, jobs.gpus[tr.run_job])
        waiting = Steps(tr.wait_start, tr.wait_end, jobs.gpus[tr.wait_job])
        capacity = float(state.cluster.pool_gpus.sum())
        top.plot(_days(edges), _mean_level(alloc, edges) / capacity, label=name, lw=1)
        bottom.plot(_days(edges), _mean_level(waiting, edges), label=name, lw=1)
    top.set_ylabel("GPU utilisation")
    top.set_ylim(0, 1.05)
    bottom.set_ylabel("waiting demand (GPUs)")
    bottom.set_xlabel("days from first submit")
    top.legend(fontsize=7, ncol=4)
    top.set_title(f"{next(iter(states.values())).scenario.name}: utilisation and waiting demand")
    return _save(fig, out / "utilization.png")


def plot_tenants(out: Path, states: dict[str, SimState]) -> Path:
    scenario = next(iter(states.values())).scenario
    edges = _edges(states)
    n = len(scenario.tenants)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 1.9 * rows), sharex=True, squeeze=False)
    for index, tenant in enumerate(scenario.tenants):
        ax: Axes = axes[index // cols][index % cols]
        for name, state in states.items():
            tr = trace_of(state)
            mine = state.jobs.tenant[tr.run_job] == index
            steps = Steps(tr.run_start[mine], tr.run_end[mine], state.jobs.gpus[tr.run_job[mine]])
            ax.plot(_days(edges), _mean_level(steps, edges), lw=0.8, label=name)
        ax.axhline(sum(tenant.guaranteed.values()), color="black", ls="--", lw=0.8, label="guarantee")
        ax.set_title(tenant.name, fontsize=8)
        ax.tick_params(labelsize=6)
    for index in range(n, rows * cols):
        axes[index // cols][index % cols].axis("off")
    axes[0][0].legend(fontsize=5)
    fig.suptitle(f"{scenario.name}: GPUs held per tenant (all types) against its guarantee", fontsize=9)
    return _save(fig, out / "tenants.png")


def plot_prices(out: Path, states: dict[str, SimState]) -> Path:
    scenario = next(iter(states.values())).scenario
    types = scenario.types
    edges = _edges(states)
    fig, axes = plt.subplots(len(types), 1, figsize=(8, 1.8 + 1.4 * len(types)), sharex=True, squeeze=False)
    for name, state in states.items():
        for k, gpu_type in enumerate(types):
            ax: Axes = axes[k][0]
            ax.plot(_days(edges), _price_level(state, k, edges), lw=1, label=name)
            ax.set_ylabel(f"{gpu_type}\ncredits/GPU-h", fontsize=7)
    axes[0][0].legend(fontsize=7, ncol=4)
    axes[-1][0].set_xlabel("days from first submit")
    title = "price per GPU type, time-weighted mean per bin (market: posted; pure-auction: clearing)"
    fig.suptitle(f"{scenario.name}: {title}", fontsize=9)
    return _save(fig, out / "prices.png")


def _price_level(state: SimState, pool: int, edges: FloatArray) -> FloatArray:
    """The price in force over each bin; a posted price may flip every round, so a mean reads better."""
    h = state.history
    reserve = state.reserve_by_pool[pool] / 1e6
    if not h.price_micro:  # a policy that posts no price charges the reserve throughout
        return np.full(len(edges) - 1, reserve)
    starts = np.array(h.price_time, dtype=np.int64)
    ends = np.append(starts[1:], max(int(edges[-1]), int(starts[-1]) + 1))
    prices = np.array([row[pool] for row in h.price_micro], dtype=np.float64) / 1e6
    covered = Steps(starts, ends, 1.0).integral(edges)
    priced = Steps(starts, ends, prices).integral(edges)
    return np.where(covered > 0, priced / np.maximum(covered, 1e-9), reserve)


def plot_queue_cdf(out: Path, states: dict[str, SimState]) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, state in states.items():
        started = state.first_start >= 0
        delay = np.sort(state.first_start[started] - state.jobs.submit_s[started]).astype(np.float64)
        if len(delay):
            ax.step(
                np.maximum(delay, 1.0), np.arange(1, len(delay) + 1) / len(delay), where="post", label=name
            )
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (s, submit to first start; 0 shown as 1)")
    ax.set_ylabel("share of started jobs")
    ax.legend(fontsize=8)
    ax.set_title(f"{next(iter(states.values())).scenario.name}: CDF of queueing delay", fontsize=9)
    return _save(fig, out / "queue_cdf.png")


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(out: Path, states: dict[str, SimState]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return [
        plot_utilization(out, states),
        plot_tenants(out, states),
        plot_prices(out, states),
        plot_queue_cdf(out, states),
    ]
