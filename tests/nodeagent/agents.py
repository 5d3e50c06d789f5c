"""Test helpers: nodes registered through the agent API, and the reports their agents send."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rest_framework.test import APIClient

from inventory.models import Node
from market.models import Lease
from market.services import rounds
from nodeagent.services.registration import bootstrap_token_create


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def gpus_of(name: str, count: int, model: str = "NVIDIA H100 80GB HBM3") -> list[dict[str, Any]]:
    return [{"uuid": f"GPU-{name}-{i}", "index": i, "model": model, "memory_mb": 81559} for i in range(count)]


@dataclass
class FakeAgent:
    """Speaks the agent protocol through the test client, as gpumarket-agent would."""

    node: Node
    credential: str
    epoch: int = 1
    seq: int = 0
    api: APIClient = field(default_factory=APIClient)

    def __post_init__(self) -> None:
        self.api.credentials(HTTP_AUTHORIZATION=f"Bearer {self.credential}")

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.api.post(f"/api/v1/agent/{path}", body, format="json")

    def get(self, path: str) -> Any:
        return self.api.get(f"/api/v1/agent/{path}")

    def heartbeat(self, **body: Any) -> Any:
        return self.post("heartbeat", {"boot_epoch": self.epoch, **body})

    def commands(self, after: int = 0) -> list[dict[str, Any]]:
        response = self.get(f"commands?after={after}")
        assert response.status_code == 200, response.json()
        return list(response.json()["commands"])

    def report(
        self, leases: list[dict[str, Any]], *, util: float = 90.0, seq: int | None = None
    ) -> dict[str, Any]:
        """A usage report with one sample per GPU of the node; each lease's job has a process on its GPUs."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        on_gpu: dict[str, list[dict[str, Any]]] = {}
        for c in leases:
            for uuid in c.pop("_gpus", []):
                on_gpu.setdefault(uuid, []).append(
                    {"pid": 1000 + c["lease"], "used_mb": 1000, "lease": c["lease"]}
                )
        gpus = [
            {
                "uuid": gpu.uuid,
                "at": now_iso(),
                "healthy": True,
                "util_pct": util if gpu.uuid in on_gpu else 0,
                "mem_used_mb": 1000,
                "power_w": 300.0,
                "energy_j": 1e6,
                "processes": on_gpu.get(gpu.uuid, []),
            }
            for gpu in self.node.gpus.all()
        ]
        return {"boot_epoch": self.epoch, "seq": seq, "sent_at": now_iso(), "gpus": gpus, "leases": leases}


def counters(lease: Lease, gpu_seconds: float, *, samples: int | None = None, **extra: Any) -> dict[str, Any]:
    """A lease's cumulative counters as the agent reports them."""
    return {
        "lease": lease.pk,
        "gpu_seconds": gpu_seconds,
        "energy_j": extra.pop("energy_j", gpu_seconds * 300),
        "util_avg": extra.pop("util_avg", 90.0),
        "util_max": extra.pop("util_max", 100.0),
        "mem_avg_mb": 1000.0,
        "mem_max_mb": 1500.0,
        "samples": samples if samples is not None else int(gpu_seconds),
        "log_tail": extra.pop("log_tail", ""),
        "_gpus": [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu")],
        **extra,
    }


def register(
    world: Any, name: str, *, gpus: int = 8, model: str = "NVIDIA H100 80GB HBM3", address: str | None = None
) -> FakeAgent:
    """A node registered with a fresh bootstrap token through the API (with `address`, where its gang
    peers reach it)."""
    secret = bootstrap_token_create(actor=world.admin).secret
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    body: dict[str, Any] = {"name": name, "agent_version": "0.1.0", "gpus": gpus_of(name, gpus, model)}
    if address is not None:
        body["address"] = address
    response = api.post("/api/v1/agent/register", body, format="json")
    assert response.status_code == 201, response.json()
    return FakeAgent(node=Node.objects.get(name=name), credential=response.json()["credential"])


def leased(job: Any) -> Lease:
    """Run a round and return the job's lease."""
    rnd = rounds.round_tick()
    assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    job.refresh_from_db()
    return Lease.objects.get(job=job)
