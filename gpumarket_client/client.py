"""The Python client: `Client(url, token, tenant=...)` or `Client.from_profile()` (what `gpumarket login`
saved). Every method returns dataclasses from gpumarket_client.models and raises gpumarket_client.errors."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpumarket_client import profiles
from gpumarket_client.models import (
    Balance,
    Estimate,
    Job,
    Me,
    Node,
    PolicyVersion,
    Price,
    RevertResult,
    Spend,
    SpendAlert,
)
from gpumarket_client.transport import Transport

Number = str | int | float | Decimal


def job_body(
    *,
    name: str,
    command: str,
    gpus: int,
    max_hours: Number,
    bids: dict[str, Number] | list[tuple[str, Number]],
    grace_seconds: int | None = None,
    cpus_per_gpu: Number | None = None,
    memory_gb_per_gpu: Number | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A submit body. `bids` in preference order: {"H100": "4.5", "A100": "2"} (credits per GPU-hour).
    `extra`: fields this client does not know yet, passed as they are (the API refuses what it does not)."""
    pairs = list(bids.items()) if isinstance(bids, dict) else list(bids)
    body: dict[str, Any] = {
        "name": name,
        "command": command,
        "gpus": gpus,
        "max_hours": str(max_hours),
        "bids": [{"gpu_type": t, "limit": str(limit)} for t, limit in pairs],
    }
    if grace_seconds is not None:
        body["grace_seconds"] = grace_seconds
    for key, value in (("cpus_per_gpu", cpus_per_gpu), ("memory_gb_per_gpu", memory_gb_per_gpu)):
        if (
            value is not None
        ):  # the job's cgroup share per GPU (docs/jobs.md); the policy's default if left out
            body[key] = str(value)
    return body | extra


class Jobs:
    def __init__(self, client: Client) -> None:
        self._c = client

    def _path(self, suffix: str = "") -> str:
        return f"tenants/{self._c.tenant}/jobs{suffix}"

    def _job(self, data: dict[str, Any]) -> Job:
        job = Job.from_api(data)
        job.client = self._c
        return job

    def submit(self, *, idempotency_key: str | None = None, **body: Any) -> Job:
        """Submit a job (job_body's arguments). A retry with the same idempotency_key returns the first job."""
        data = self._c.http.post(self._path(), job_body(**body), idempotency_key=idempotency_key)
        return self._job(data)

    def get(self, job_id: int) -> Job:
        return self._job(self._c.http.get(self._path(f"/{job_id}")))

    def list(
        self, *, state: str | None = None, gpu_type: str | None = None, page_size: int = 50, page: int = 1
    ) -> list[Job]:
        params: dict[str, Any] = {"page_size": page_size, "page": page}
        if state:
            params["state"] = state
        if gpu_type:
            params["gpu_type"] = gpu_type
        return [self._job(row) for row in self._c.http.get(self._path(), params)["results"]]

    def cancel(self, job_id: int, *, idempotency_key: str | None = None) -> Job:
        return self._job(self._c.http.post(self._path(f"/{job_id}/cancel"), idempotency_key=idempotency_key))


class Client:
    def __init__(self, url: str, token: str, *, tenant: str = "", transport: Transport | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = transport or Transport(self.url, token)
        self._tenant = tenant
        self.jobs = Jobs(self)

    @classmethod
    def from_profile(cls, name: str | None = None) -> Client:
        found = profiles.load(name)
        return cls(found.url, found.token, tenant=found.tenant)

    @property
    def tenant(self) -> str:
        """The team the token is for (asked of the server once when not given)."""
        if not self._tenant:
            me = self.me()
            self._tenant = me.token_tenant or (me.tenants[0].slug if me.tenants else "")
        return self._tenant

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def me(self) -> Me:
        return Me.from_api(self.http.get("me"))

    def estimate(self, **body: Any) -> Estimate:
        """What the portal's submit form shows for this job before it is submitted (job_body's arguments)."""
        return Estimate.from_api(
            self.http.post(f"tenants/{self.tenant}/jobs/estimate", job_body(**body), write=False)
        )

    def prices(self) -> list[Price]:
        return [Price.from_api(row) for row in self.http.get("prices")]

    def balance(self) -> Balance:
        return Balance.from_api(self.http.get(f"tenants/{self.tenant}/balance"))

    def spend(self, *, days: int = 30) -> Spend:
        return Spend.from_api(self.http.get(f"tenants/{self.tenant}/spend", {"days": days}))

    def spend_alerts(self) -> list[SpendAlert]:
        return [SpendAlert.from_api(row) for row in self.http.get(f"tenants/{self.tenant}/spend-alerts")]

    # Platform admins.

    def policy_versions(self, *, page_size: int = 50) -> list[PolicyVersion]:
        rows = self.http.get("policy/versions", {"page_size": page_size})["results"]
        return [PolicyVersion.from_api(row) for row in rows]

    def policy_version(self, number: int) -> PolicyVersion:
        """One version with `diff`: from the policy in force to it."""
        return PolicyVersion.from_api(self.http.get(f"policy/versions/{number}"))

    def policy_revert(self, number: int, *, reason: str, idempotency_key: str | None = None) -> RevertResult:
        body = {"reason": reason}
        path = f"policy/versions/{number}/revert"
        return RevertResult.from_api(self.http.post(path, body, idempotency_key=idempotency_key))

    def nodes(self) -> list[Node]:
        return [Node.from_api(row) for row in self.http.get("nodes", {"page_size": 500})["results"]]

    def drain(self, name: str, *, idempotency_key: str | None = None) -> Node:
        return Node.from_api(self.http.post(f"nodes/{name}/drain", idempotency_key=idempotency_key))
