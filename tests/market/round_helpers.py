"""Shared helpers for the round tests: jobs created directly (the jobs API has its own tests)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from market.models import Bid, Job


def make_job(
    tenant: Any,
    user: Any,
    *,
    gpus: int = 1,
    limits: dict[Any, float] | None = None,
    hours: float = 1,
    grace: int = 30,
    age_s: int = 0,
    name: str = "train",
) -> Job:
    """A pending job bidding `limits` ({GpuType: credits per GPU-hour}) in preference order."""
    rows = [{"gpu_type": t.name, "limit": round(price * 1_000_000)} for t, price in (limits or {}).items()]
    job = Job.objects.create(
        tenant=tenant,
        submitter=user,
        name=name,
        command="python train.py",
        gpus=gpus,
        max_seconds=round(hours * 3600),
        grace_seconds=grace,
        limits=rows,
        submitted_at=timezone.now() - timedelta(seconds=age_s),
    )
    Bid.objects.create(job=job, version=1, limits=rows, actor=user)
    return job
