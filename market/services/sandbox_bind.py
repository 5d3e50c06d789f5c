"""What a bind carries for the agent's job sandbox, and which GPUs are on nodes without it (issue 35 part 2,
docs/agent.md §The sandbox). Shared by the round's commit and a moved lease's later bind (market.services.moves),
so a job is confined the same wherever it starts."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings

from inventory.models import Gpu
from market import bulk
from market.models import Job


def unconfined_gpus(gpu_ids: Any) -> set[int]:
    """Of these GPUs, those on nodes whose agent said the sandbox is unavailable there (market.selectors.book
    offers such nodes only while a trusted tenant bids; this keeps an untrusted winner off them)."""
    return set(Gpu.objects.filter(pk__in=gpu_ids, node__unconfined=True).values_list("pk", flat=True))


def sandbox_fields(job_ids: list[int]) -> dict[int, tuple[str, Decimal | None, Decimal | None]]:
    """Per job: its tenant's slug (whose Unix user it runs as) and its CPUs and memory per GPU. Read apart
    from the locked job rows, so that the lock takes no tenant row."""
    rows = Job.objects.filter(pk__in=bulk.any_of(job_ids)).values_list(
        "pk", "tenant__slug", "cpus_per_gpu", "memory_gb_per_gpu"
    )
    return {pk: (slug, cpus, memory) for pk, slug, cpus, memory in rows}


def sandbox_payload(fields: tuple[str, Decimal | None, Decimal | None], gpus: int) -> dict[str, object]:
    """The bind's part for the sandbox: this node's share of the job's CPUs and memory (its GPUs here times
    the job's request per GPU, else the policy's default), its process and log limits, the tenant."""
    slug, cpus, memory = fields
    cpus_per_gpu = float(cpus) if cpus is not None else float(settings.JOB_CPUS_PER_GPU_DEFAULT)
    memory_gb = float(memory) if memory is not None else float(settings.JOB_MEMORY_GB_PER_GPU_DEFAULT)
    return {
        "tenant": slug,
        "cpus": round(cpus_per_gpu * gpus, 2),
        "memory_mb": int(memory_gb * 1024 * gpus),
        "pids": settings.JOB_PIDS_MAX,
        "log_max_bytes": settings.JOB_LOG_MAX_MB * 1024 * 1024,
    }
