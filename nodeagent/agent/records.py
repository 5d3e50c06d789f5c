"""The job record the agent keeps per lease in its state directory (STATE_DIR/jobs/<lease>.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Counters:
    """A lease's cumulative usage from its job's start (docs/agent.md, `POST usage`). gpu_seconds is
    recomputed from the start time at every sample, so time the agent was down still counts, once."""

    gpu_seconds: float = 0.0
    energy_j: float = 0.0
    util_sum: float = 0.0  # per sample: the mean utilisation of the job's GPUs
    util_max: float = 0.0  # the busiest reading of any of its GPUs
    mem_sum: float = 0.0
    mem_max: float = 0.0
    samples: int = 0
    energy_seen: dict[str, float] = field(default_factory=dict)  # each GPU's counter at the last sample

    def summary(self) -> dict[str, Any]:
        n = max(self.samples, 1)
        return {
            "gpu_seconds": round(self.gpu_seconds, 3),
            "energy_j": round(self.energy_j, 3),
            "util_avg": round(self.util_sum / n, 2),
            "util_max": self.util_max,
            "mem_avg_mb": round(self.mem_sum / n, 1),
            "mem_max_mb": self.mem_max,
            "samples": self.samples,
        }


@dataclass
class Outcome:
    exit_code: int | None
    signal: int | None
    ended_at: float  # wall time (epoch seconds)
    reason: str | None = None  # said on the job page instead of a bare signal: "out of memory"


@dataclass
class Job:
    lease: int
    job: int
    name: str
    argv: list[str]
    gpus: list[str]
    max_seconds: float
    grace_seconds: float
    checkpoint_dir: str
    work_dir: str
    log_path: str
    exit_path: str
    run_as: list[int] | None = None  # [uid, gid] the job runs as (--job-user); None: the agent's user
    sandboxed: bool = (
        False  # run in the sandbox (sandbox.py); records from before it read False and keep running
    )
    cgroups: list[str] = field(
        default_factory=list
    )  # the job's cgroups (sandbox_cgroups.py), removed at its end
    tenant: str = ""
    log_max_bytes: int = 0  # its log's cap from the bind (the policy's); 0: the agent's --log-max-bytes  # the tenant's slug, from the bind: whose user it runs as, whose GPUs it had
    pid: int = 0  # the shim: session and process group leader of the job
    pid_start: int = 0  # its start time in clock ticks after boot (/proc/<pid>/stat field 22)
    started_at: float = 0.0  # wall time of the spawn
    seen_at: float = 0.0  # the last time the job was seen alive
    stopped_by: str | None = None  # "preempt" | "release" | "expiry"
    kill_at: float | None = None  # when the grace period ends (wall time)
    killed: bool = False  # SIGKILL sent
    outcome: Outcome | None = None
    counters: Counters = field(default_factory=Counters)
    started_reported: bool = False
    final_report: str | None = None  # the spooled report carrying the final counters
    exit_reported: bool = False
    checkpoint_at: float = 0.0  # the newest checkpoint the job made in this lease (wall time; 0: none yet)
    log_offset: int = 0  # how far its log was read for checkpoint markers (nodeagent.agent.checkpoints)
    gang: dict[str, Any] | None = None  # the bind's gang: rank, nodes, rendezvous (nodeagent.agent.gang)

    @property
    def running(self) -> bool:
        return self.outcome is None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        data = dict(data)
        data["counters"] = Counters(**data["counters"])
        data["outcome"] = Outcome(**data["outcome"]) if data.get("outcome") else None
        return cls(**data)
