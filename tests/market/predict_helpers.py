"""Finished jobs with measured runtimes, made directly (the agent's path has its own tests)."""

from __future__ import annotations

from datetime import timedelta
from itertools import count
from typing import Any

from django.utils import timezone

from inventory.models import Node
from market.models import EndReason, Job, JobState, Lease, LeaseState, LeaseUsage, Round

_seq = count(1)


def a_round(age_s: int = 0) -> Round:
    slot = timezone.now() - timedelta(seconds=age_s, microseconds=next(_seq))
    return Round.objects.create(slot=slot, period_s=300)


def lease_for(
    job: Job, node: Node, *, price: int = 2_000_000, state: str = LeaseState.RUNNING, ran_s: float = 0,
    max_seconds: int | None = None,
) -> Lease:  # fmt: skip
    now = timezone.now()
    rnd = a_round()
    return Lease.objects.create(
        job=job,
        tenant=job.tenant,
        round=rnd,
        node=node,
        gpu_type=node.gpu_type,
        tier="S",
        preemptible=True,
        price=price,
        gpus=job.gpus,
        max_seconds=max_seconds or job.max_seconds,
        grace_seconds=job.grace_seconds,
        hold_key=f"test:{rnd.pk}:{job.pk}",
        state=state,
        started_at=now - timedelta(seconds=ran_s + 5),
        running_at=now - timedelta(seconds=ran_s),
    )


def finished_job(
    tenant: Any, user: Any, node: Node, *, runtime_s: float, name: str = "train-7",
    command: str = "python train.py --lr 0.1", gpus: int = 1, state: str = JobState.COMPLETED,
    ended_ago_s: int = 60, measured: bool = True,
) -> Job:  # fmt: skip
    """A job that ran once for `runtime_s`, its lease ended `ended_ago_s` ago with that usage measured."""
    ended = timezone.now() - timedelta(seconds=ended_ago_s)
    job = Job.objects.create(
        tenant=tenant, submitter=user, name=name, command=command, gpus=gpus, max_seconds=86400,
        grace_seconds=30, limits=[], state=state, ended_at=ended,
    )  # fmt: skip
    lease = lease_for(job, node, state=LeaseState.ENDED)
    lease.running_at = ended - timedelta(seconds=runtime_s)
    lease.ended_at, lease.end_reason = ended, EndReason.COMPLETED
    lease.save()
    if measured:
        LeaseUsage.objects.create(lease=lease, node=node, gpu_seconds=runtime_s * gpus, samples=10)
    return job
