"""Work thrown away by preemption (docs/rounds.md §Lost work): what a preempted lease's job had computed since
its last checkpoint, in GPU-seconds, as the round commit recorded it on the lease (Lease.lost_gpu_s)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Sum

from market.models import Lease


def lost_gpu_seconds(lease: Lease, now: datetime) -> float:
    """GPU-seconds the lease's job loses if it is stopped at `now`: its GPUs times the seconds since the later
    of its job's start and its last checkpoint. The clearing estimates the same from the lease's start
    (allocator.book.Leases.lost_gpu_s); a job that never started running has lost nothing."""
    if lease.running_at is None:
        return 0.0
    since = max(lease.running_at, lease.last_checkpoint_at or lease.running_at)
    return float(lease.gpus) * max(0.0, (now - since).total_seconds())


def gpu_time(gpu_seconds: float) -> str:
    """An amount of GPU time in a unit that reads: "40 GPU-seconds", "12 GPU-minutes", "3.5 GPU-hours"."""
    if gpu_seconds < 60:
        n = round(gpu_seconds)
        return f"{n} GPU-second{'' if n == 1 else 's'}"
    if gpu_seconds < 3600:
        n = round(gpu_seconds / 60)
        return f"{n} GPU-minute{'' if n == 1 else 's'}"
    hours = gpu_seconds / 3600
    n = f"{hours:.1f}".removesuffix(".0") if hours < 100 else f"{hours:,.0f}"
    return f"{n} GPU-hour{'' if n == '1' else 's'}"


def lost_by_tenant(*, round_id: int | None = None) -> dict[str, float]:
    """GPU-seconds lost to preemption per tenant slug (every tenant that lost any), over all rounds or the one
    given. Reads only preempted leases (the partial index on preempt_reason)."""
    leases = Lease.objects.exclude(preempt_reason="").filter(lost_gpu_s__isnull=False)
    if round_id is not None:
        leases = leases.filter(preempted_round_id=round_id)
    rows = leases.values_list("tenant__slug").annotate(lost=Sum("lost_gpu_s")).order_by("tenant__slug")
    return {slug: float(lost or 0.0) for slug, lost in rows}
