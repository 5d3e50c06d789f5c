"""Work thrown away by preemption (docs/rounds.md §Lost work): what a preempted lease's job had computed since
its last checkpoint, in GPU-seconds, as the round commit recorded it on the lease (Lease.lost_gpu_s). The figure
is allocator.lost's, the one the clearing ranks victims on; this module only reads a lease's times for it."""

from __future__ import annotations

from datetime import datetime
from typing import overload

from django.db.models import Sum

from allocator import lost
from market.models import Lease


@overload
def book_seconds(at: datetime) -> int: ...
@overload
def book_seconds(at: None) -> None: ...
def book_seconds(at: datetime | None) -> int | None:
    """A time on the frozen book's clock (whole epoch seconds), the one conversion the freeze and the commit
    share, so the figure the clearing ranks a victim on and the one the commit records are the same integer."""
    return None if at is None else int(at.timestamp())


def lost_gpu_seconds(lease: Lease, now: datetime) -> float:
    """GPU-seconds the lease's job loses if it is stopped at `now` (allocator.lost: its GPUs times the seconds
    since the later of its job's start running and its last checkpoint; nothing if it never started running),
    the same figure the clearing ranked it on (allocator.book.Leases.lost_gpu_s over the frozen book)."""
    t = book_seconds(now)
    since = lost.lost_since(book_seconds(lease.running_at), book_seconds(lease.last_checkpoint_at), t)
    return float(lost.lost_gpu_s(int(lease.gpus), since, t))


def gpu_time(gpu_seconds: float) -> str:
    """An amount of GPU time in a unit that reads, the one way every page and sentence shows measured or lost
    GPU time: "40 GPU-seconds" under a minute, "2.5 GPU-minutes" / "12 GPU-minutes" under an hour, then
    "1.25 GPU-hours" (two decimals under 10 hours, one under 100, whole numbers above). A 15-second job
    reads "15 GPU-seconds", not "0.00 GPU-hours"; a non-zero amount under half a second reads "under 1
    GPU-second", never as nothing."""
    if 0 < gpu_seconds < 0.5:
        return "under 1 GPU-second"
    if gpu_seconds < 59.5:
        return _plural(str(round(gpu_seconds)), "GPU-second")
    minutes = gpu_seconds / 60
    if minutes < 59.5:
        return _plural(_trimmed(minutes, 1) if minutes < 10 else str(round(minutes)), "GPU-minute")
    hours = gpu_seconds / 3600
    if hours < 100:
        return _plural(_trimmed(hours, 2 if hours < 10 else 1), "GPU-hour")
    return _plural(f"{hours:,.0f}", "GPU-hour")


def _trimmed(value: float, places: int) -> str:
    """`value` with at most `places` decimals, trailing zeros dropped: 1.50 -> "1.5", 2.00 -> "2"."""
    text = f"{value:.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _plural(number: str, unit: str) -> str:
    return f"{number} {unit}{'' if number == '1' else 's'}"


def lost_by_tenant(*, round_id: int | None = None) -> dict[str, float]:
    """GPU-seconds lost to preemption per tenant slug (every tenant that lost any), over all rounds or the one
    given. Reads only preempted leases (the partial index on preempt_reason)."""
    leases = Lease.objects.exclude(preempt_reason="").filter(lost_gpu_s__isnull=False)
    if round_id is not None:
        leases = leases.filter(preempted_round_id=round_id)
    rows = leases.values_list("tenant__slug").annotate(lost=Sum("lost_gpu_s")).order_by("tenant__slug")
    return {slug: float(lost or 0.0) for slug, lost in rows}
