"""The state directory: everything the agent must remember across a restart (docs/agent.md §The daemon).

lock                 held (flock) while an agent runs: one agent per directory
credential           the node credential, mode 0600
node.json            node id, name, heartbeat and poll periods from the last registration
state.json           boot epoch, highest applied fence, last command seen, acknowledgements not yet sent
jobs/<lease>.json    one record per job (spec, shim pid and start time, outcome, counters, what is reported)
jobs/done/           records whose exit the server acknowledged
run/<lease>/         the shim's exit.json and the job's working directory
logs/<lease>.log     the job's stdout and stderr
spool/<epoch>-<seq>.json   usage reports not yet acknowledged, one file each (protocol 2: one per sample tick,
                           not yet put in a report)
outbox/report.json   protocol 2: the report assembled from the oldest ticks and not yet acknowledged; sent again
                     as it is (same boot epoch and seq) until it is
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.agent.fsutil import read_json, write_atomic, write_json
from nodeagent.agent.records import Job


class StateLocked(Exception):
    """Another agent already runs on this state directory."""


@dataclass
class Meta:
    boot_epoch: int = 0
    fence: int = 0  # the highest fence of an applied command
    last_command: int = 0  # the highest command id handled (applied or refused)
    acks: list[dict[str, Any]] = field(default_factory=list)  # {"id", "result", "detail"} not yet sent
    report_seq: int = 0  # protocol 2: the last report's seq in this boot epoch


class StateDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("jobs/done", "run", "logs", "spool/rejected", "outbox"):
            (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        root.chmod(0o700)  # it holds the credential and the tenants' logs
        self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StateLocked(f"another agent is running on {root}") from None
        self.meta = Meta(**(read_json(root / "state.json") or {}))

    def close(self) -> None:
        os.close(self._lock_fd)

    # credential and registration
    @property
    def credential(self) -> str:
        path = self.root / "credential"
        return path.read_text().strip() if path.exists() else ""

    @credential.setter
    def credential(self, secret: str) -> None:
        write_atomic(self.root / "credential", secret.encode(), mode=0o600)

    def node(self) -> dict[str, Any]:
        return read_json(self.root / "node.json") or {}

    def save_node(self, node: dict[str, Any]) -> None:
        write_json(self.root / "node.json", node)

    # boot epoch, fence, commands
    def new_boot_epoch(self) -> int:
        self.meta.boot_epoch += 1
        self.meta.report_seq = 0
        self.save_meta()
        return self.meta.boot_epoch

    def save_meta(self) -> None:
        write_json(self.root / "state.json", asdict(self.meta))

    # jobs
    def job_paths(self, lease: int) -> tuple[Path, Path, Path]:
        """The job's run directory (shim's exit.json, working directory) and log file."""
        run = self.root / "run" / str(lease)
        return run, run / "exit.json", self.root / "logs" / f"{lease}.log"

    def jobs(self) -> dict[int, Job]:
        found = {}
        for path in (self.root / "jobs").glob("*.json"):
            job = Job.from_json(read_json(path))
            found[job.lease] = job
        return found

    def knows(self, lease: int) -> bool:
        return any((self.root / "jobs" / sub / f"{lease}.json").exists() for sub in ("", "done"))

    def save_job(self, job: Job, *, durable: bool = True) -> None:
        write_json(self.root / "jobs" / f"{job.lease}.json", job.to_json(), durable=durable)

    def retire_job(self, job: Job) -> None:
        """Its exit is acknowledged: keep the record for the operator, out of the agent's way."""
        self.save_job(job)
        os.replace(
            self.root / "jobs" / f"{job.lease}.json", self.root / "jobs" / "done" / f"{job.lease}.json"
        )

    def drop_job(self, lease: int) -> None:
        (self.root / "jobs" / f"{lease}.json").unlink(missing_ok=True)

    # the usage spool
    @staticmethod
    def report_name(boot_epoch: int, seq: int) -> str:
        return f"{boot_epoch:010d}-{seq:012d}.json"  # names sort in (epoch, seq) order

    def spool_put(self, name: str, report: dict[str, Any]) -> None:
        write_json(self.root / "spool" / name, report)

    def spooled(self) -> list[Path]:
        return sorted((self.root / "spool").glob("*.json"))

    def spool_done(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def spool_reject(self, path: Path) -> None:
        os.replace(path, self.root / "spool" / "rejected" / path.name)

    # protocol 2: the report being sent
    def outbox(self) -> dict[str, Any] | None:
        """The assembled report not yet acknowledged. Its ticks are removed from the spool once it is written;
        a crash in between leaves them there, so they are removed here (never sent twice in two reports)."""
        report: dict[str, Any] | None = read_json(self.root / "outbox" / "report.json")
        if report is not None:
            for name in report.get("ticks", []):
                (self.root / "spool" / name).unlink(missing_ok=True)
        return report

    def outbox_put(self, report: dict[str, Any]) -> None:
        write_json(self.root / "outbox" / "report.json", report)
        for name in report["ticks"]:
            (self.root / "spool" / name).unlink(missing_ok=True)

    def outbox_done(self) -> None:
        (self.root / "outbox" / "report.json").unlink(missing_ok=True)

    def outbox_reject(self) -> None:
        path = self.root / "outbox" / "report.json"
        report = read_json(path) or {}
        os.replace(
            path,
            self.root / "spool" / "rejected" / f"report-{report.get('boot_epoch')}-{report.get('seq')}.json",
        )
